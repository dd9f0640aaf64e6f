// The one place that picks the vector width. Every xsimd kernel is written once
// over `Batch` and compiled for whatever the translation unit targets: AVX-512
// with -march=native on this machine, SSE2 in a portable build.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <type_traits>

#include "streamllm/kernels/runtime/avx512_warnings.hpp"

namespace streamllm::kernels {

using Arch = xsimd::default_arch;
using Batch = xsimd::batch<float, Arch>;
inline constexpr std::size_t kLanes = Batch::size;

inline Batch load(const float* p) { return Batch::load_unaligned(p); }
inline void store(float* p, const Batch& b) { b.store_unaligned(p); }

// Keeps v in a register from here on. GCC folds a load whose value several
// fmas use into each of them (one load per fma, not one in all): where the
// loads already rival the fmas (the attention tiles), that makes the load
// ports the limit.
inline void in_register(Batch& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(v.data));
#else
  (void)v;
#endif
}

// End of the whole vectors in n values: loops run [0, vector_end) by vectors
// and [vector_end, n) one by one.
inline constexpr std::size_t vector_end(std::size_t n) { return n - n % kLanes; }

// Lane i of the result: the sum of rows[i]'s lanes (a transposing reduction).
// xsimd 8.1's haddp returns AVX-512 results with lanes 2-3 / 4-5 and 10-11 /
// 12-13 swapped; feeding it the rows in that order undoes the swap.
// Not inlined: GCC 12 reports its AVX-512 shuffles' "undefined" sources as
// uninitialised wherever they are inlined (avx512_warnings.hpp), and the
// marks below only cover this body.
STREAMLLM_BEGIN_AVX512_INTRINSICS
[[gnu::noinline]] inline Batch sum_each(const Batch* rows) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
    static constexpr std::size_t perm[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
    Batch r[16];
    for (std::size_t i = 0; i < 16; ++i) r[perm[i]] = rows[i];
    return xsimd::haddp(r);
  } else {
    return xsimd::haddp(rows);
  }
}
STREAMLLM_END_AVX512_INTRINSICS

// Name of the instruction set the xsimd kernels were compiled for.
inline const char* simd_arch_name() { return Arch::name(); }

}  // namespace streamllm::kernels
