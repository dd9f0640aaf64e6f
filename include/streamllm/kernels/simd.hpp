// The one place that picks the vector width. Every xsimd kernel is written once
// over `Batch` and compiled for whatever the translation unit targets: AVX-512
// with -march=native on this machine, SSE2 in a portable build.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>

namespace streamllm::kernels {

using Arch = xsimd::default_arch;
using Batch = xsimd::batch<float, Arch>;
inline constexpr std::size_t kLanes = Batch::size;

inline Batch load(const float* p) { return Batch::load_unaligned(p); }
inline void store(float* p, const Batch& b) { b.store_unaligned(p); }

// End of the whole vectors in n values: loops run [0, vector_end) by vectors
// and [vector_end, n) one by one.
inline constexpr std::size_t vector_end(std::size_t n) { return n - n % kLanes; }

// Name of the instruction set the xsimd kernels were compiled for.
inline const char* simd_arch_name() { return Arch::name(); }

}  // namespace streamllm::kernels
