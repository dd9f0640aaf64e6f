// The vector type of every kernel family (portable: xsimd's batch for the
// build's target; avx2; avx512), and the one place that chooses among them at
// run time. Ops are written once over `Vec` (ops/*-inl.hpp), compiled once
// per family (for_each_isa.hpp), and called through STREAMLLM_ON_ACTIVE_ISA,
// so a build without -march=native runs the same kernels as one with it.
#pragma once

#include "streamllm/kernels/runtime/cpu_features.hpp"
#include "streamllm/kernels/simd/avx2.hpp"
#include "streamllm/kernels/simd/avx512.hpp"
#include "streamllm/kernels/simd/avx512_warnings.hpp"
#include "streamllm/kernels/simd/portable.hpp"
#include "streamllm/kernels/simd/target.hpp"

namespace streamllm::kernels {

// The most lanes of any family's Vec: tables that every family reads (RoPE's)
// are laid out for this many.
inline constexpr std::size_t kMaxLanes = 16;
static_assert(portable::kLanes <= kMaxLanes && kMaxLanes % portable::kLanes == 0);

}  // namespace streamllm::kernels

// `return family::call`, for the family active_isa() names: a function
// compiled per family (for_each_isa.hpp) called from code compiled once.
#ifdef STREAMLLM_HAVE_X86_KERNELS
#define STREAMLLM_ON_ACTIVE_ISA(...)                                                                  \
  switch (::streamllm::kernels::active_isa()) {                                                       \
    case ::streamllm::kernels::Isa::Avx512Bf16Vnni: return ::streamllm::kernels::avx512::__VA_ARGS__; \
    case ::streamllm::kernels::Isa::Avx2: return ::streamllm::kernels::avx2::__VA_ARGS__;             \
    case ::streamllm::kernels::Isa::Portable: break;                                                  \
  }                                                                                                   \
  return ::streamllm::kernels::portable::__VA_ARGS__
#else
#define STREAMLLM_ON_ACTIVE_ISA(...) return ::streamllm::kernels::portable::__VA_ARGS__
#endif
