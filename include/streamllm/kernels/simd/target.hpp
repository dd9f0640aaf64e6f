// The instruction sets the kernels are compiled for, whatever the build's
// flags: each x86 family's code carries its target (a function attribute, or
// a region of functions), and runtime/cpu_features.hpp chooses one family per
// run. A portable binary so runs AVX-512 where the CPU has it.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STREAMLLM_HAVE_X86_KERNELS 1

// The AVX2 family (Isa::Avx2), and the AVX-512 one (Isa::Avx512Bf16Vnni):
// every extension cpu_features requires of it.
#define STREAMLLM_AVX2_TARGET "avx2,fma,f16c"
#define STREAMLLM_AVX512_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx512vbmi"

// On one function.
#define STREAMLLM_AVX2 __attribute__((target(STREAMLLM_AVX2_TARGET)))
#define STREAMLLM_AVX512 __attribute__((target(STREAMLLM_AVX512_TARGET)))

// On every function between BEGIN and STREAMLLM_END_TARGET, templates and
// lambdas included: the ops written once over a vector type (ops/*-inl.hpp)
// are included once per family inside these.
#if defined(__clang__)
#define STREAMLLM_BEGIN_TARGET(isa) \
  _Pragma(STREAMLLM_TARGET_PRAGMA_(clang attribute push(__attribute__((target(isa))), apply_to = function)))
#define STREAMLLM_END_TARGET _Pragma("clang attribute pop")
#else
#define STREAMLLM_BEGIN_TARGET(isa) _Pragma("GCC push_options") _Pragma(STREAMLLM_TARGET_PRAGMA_(GCC target(isa)))
#define STREAMLLM_END_TARGET _Pragma("GCC pop_options")
#endif
#define STREAMLLM_TARGET_PRAGMA_(...) #__VA_ARGS__
#endif
