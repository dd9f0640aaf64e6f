// Compiles a body of code written once over `Vec` (a *-inl.hpp file, named by
// STREAMLLM_PER_ISA_BODY) once per kernel family: in namespace
// streamllm::kernels::portable for the build's own target, and on x86 in
// kernels::avx2 and kernels::avx512, each for its family whatever the
// build's flags (target.hpp). The body opens namespace
// streamllm::kernels::STREAMLLM_ISA, where `Vec` and its operations are that
// family's (vec.hpp); STREAMLLM_ON_ACTIVE_ISA then calls the family that
// runs on this CPU. gemma.cpp's ops/*-inl.h over Highway's foreach_target.h
// are the model.
//
// No include guard: it is included once per body, e.g.
//   #define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/rmsnorm-inl.hpp"
//   #include "streamllm/kernels/simd/for_each_isa.hpp"

#ifndef STREAMLLM_PER_ISA_BODY
#error "define STREAMLLM_PER_ISA_BODY (the body to compile per kernel family) before including for_each_isa.hpp"
#endif

#define STREAMLLM_ISA portable
#include STREAMLLM_PER_ISA_BODY
#undef STREAMLLM_ISA

#ifdef STREAMLLM_HAVE_X86_KERNELS
STREAMLLM_BEGIN_TARGET(STREAMLLM_AVX2_TARGET)
#define STREAMLLM_ISA avx2
#include STREAMLLM_PER_ISA_BODY
#undef STREAMLLM_ISA
STREAMLLM_END_TARGET

STREAMLLM_BEGIN_TARGET(STREAMLLM_AVX512_TARGET)
STREAMLLM_BEGIN_AVX512_INTRINSICS
#define STREAMLLM_ISA avx512
#include STREAMLLM_PER_ISA_BODY
#undef STREAMLLM_ISA
STREAMLLM_END_AVX512_INTRINSICS
STREAMLLM_END_TARGET
#endif

#undef STREAMLLM_PER_ISA_BODY
