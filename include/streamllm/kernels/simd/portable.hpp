// The portable family's vector: xsimd's batch for the architecture the build
// targets (SSE2 on a default x86-64 build, AVX-512 with -march=native on
// such a CPU, NEON on ARM), with the few operations the ops need that xsimd
// does not name. Everything else (fma, max, select, any, exp, hadd) is
// xsimd's own, found by argument-dependent lookup.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "streamllm/core/dtype.hpp"
#include "streamllm/kernels/simd/avx512_warnings.hpp"

namespace streamllm::kernels::portable {

using Vec = xsimd::batch<float, xsimd::default_arch>;
inline constexpr std::size_t kLanes = Vec::size;

// Loads and stores of any alignment, and the end of the whole vectors in n
// values: loops run [0, vector_end) by vectors and [vector_end, n) one by one.
inline Vec load(const float* p) { return Vec::load_unaligned(p); }
inline void store(float* p, const Vec& v) { v.store_unaligned(p); }
inline constexpr std::size_t vector_end(std::size_t n) { return n - n % kLanes; }

// Lane i: the sum of rows[i]'s lanes (a transposing reduction).
// xsimd 8.1's haddp returns AVX-512 results with lanes 2-3 / 4-5 and 10-11 /
// 12-13 swapped; feeding it the rows in that order undoes the swap.
// Not inlined: GCC 12 reports its AVX-512 shuffles' "undefined" sources as
// uninitialised wherever they are inlined (avx512_warnings.hpp), and the
// marks below only cover this body.
STREAMLLM_BEGIN_AVX512_INTRINSICS
[[gnu::noinline]] inline Vec sum_each(const Vec* rows) {
  if constexpr (std::is_base_of_v<xsimd::avx512f, xsimd::default_arch>) {
    static constexpr std::size_t perm[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
    Vec r[16];
    for (std::size_t i = 0; i < 16; ++i) r[perm[i]] = rows[i];
    return xsimd::haddp(r);
  } else {
    return xsimd::haddp(rows);
  }
}
STREAMLLM_END_AVX512_INTRINSICS

namespace detail {
struct SwapPairs {
  static constexpr std::uint32_t get(std::size_t i, std::size_t) { return static_cast<std::uint32_t>(i ^ 1u); }
};
}  // namespace detail

// (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...): RoPE's pairs swapped.
inline Vec swap_pairs(const Vec& v) {
  using UBatch = xsimd::batch<std::uint32_t, xsimd::default_arch>;
  constexpr auto swap = xsimd::make_batch_constant<UBatch, detail::SwapPairs>();
  return xsimd::swizzle(v, swap);
}

// Keeps v in a register from here on. GCC folds a load whose value several
// fmas use into each of them (one load per fma, not one in all): where the
// loads already rival the fmas (the attention tiles), that makes the load
// ports the limit.
inline void in_register(Vec& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(v.data));
#else
  (void)v;
#endif
}

// Lanes from a cache's compact rows (quant/kv_types.hpp), converted one by
// one: halves, bfloat16s, int8s, or nibbles (low or high) less 8, as floats.
template <class F>
inline Vec load_converted(F element) {
  alignas(64) float x[kLanes];
  for (std::size_t i = 0; i < kLanes; ++i) x[i] = element(i);
  return Vec::load_aligned(x);
}
inline float f16_scalar(std::uint16_t h) { return f16_to_f32(h); }  // a block's scale
inline Vec load_f16(const std::uint16_t* p) { return load_converted([p](std::size_t i) { return f16_to_f32(p[i]); }); }
inline Vec load_bf16(const std::uint16_t* p) { return load_converted([p](std::size_t i) { return bf16_to_f32(p[i]); }); }
inline Vec load_i8(const std::int8_t* p) { return load_converted([p](std::size_t i) { return static_cast<float>(p[i]); }); }
inline Vec load_nibbles(const std::uint8_t* p, bool high) {
  return load_converted([p, high](std::size_t i) { return static_cast<float>((high ? p[i] >> 4 : p[i] & 15) - 8); });
}

// The architecture xsimd compiled this family for (sse2, avx512bw, neon64...).
inline const char* arch_name() { return xsimd::default_arch::name(); }

}  // namespace streamllm::kernels::portable
