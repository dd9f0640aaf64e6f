// The AVX-512 family's vector: 16 floats in a zmm register, with the
// operations the ops are written over (ops/*-inl.hpp). Compiled for AVX-512
// whatever the build's flags (target.hpp). Each operation is written as
// xsimd's AVX-512 batch writes it, in the same order, so a build for this CPU
// gives the same bits through either.
#pragma once

#include "streamllm/kernels/simd/target.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "streamllm/kernels/simd/avx512_warnings.hpp"

STREAMLLM_BEGIN_TARGET(STREAMLLM_AVX512_TARGET)
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Which lanes a comparison held in.
struct VecMask {
  __mmask16 data;
  VecMask operator&(VecMask o) const { return {static_cast<__mmask16>(data & o.data)}; }
};

struct Vec {
  static constexpr std::size_t size = 16;
  using batch_bool_type = VecMask;
  __m512 data;

  Vec() = default;
  Vec(__m512 v) : data(v) {}                 // NOLINT(google-explicit-constructor): a register is a Vec
  Vec(float x) : data(_mm512_set1_ps(x)) {}  // NOLINT(google-explicit-constructor): every lane x

  static Vec load_unaligned(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load_aligned(const float* p) { return _mm512_load_ps(p); }
  void store_unaligned(float* p) const { _mm512_storeu_ps(p, data); }
  void store_aligned(float* p) const { _mm512_store_ps(p, data); }

  Vec operator+(Vec o) const { return _mm512_add_ps(data, o.data); }
  Vec operator-(Vec o) const { return _mm512_sub_ps(data, o.data); }
  Vec operator*(Vec o) const { return _mm512_mul_ps(data, o.data); }
  Vec operator/(Vec o) const { return _mm512_div_ps(data, o.data); }
  Vec operator-() const { return _mm512_sub_ps(_mm512_setzero_ps(), data); }  // 0 - x, as xsimd
  Vec& operator+=(Vec o) { return *this = *this + o; }

  VecMask operator>(Vec o) const { return {_mm512_cmp_ps_mask(data, o.data, _CMP_GT_OQ)}; }
  VecMask operator>=(Vec o) const { return {_mm512_cmp_ps_mask(data, o.data, _CMP_GE_OQ)}; }
  VecMask operator<=(Vec o) const { return {_mm512_cmp_ps_mask(data, o.data, _CMP_LE_OQ)}; }
};

inline constexpr std::size_t kLanes = Vec::size;

// Loads and stores of any alignment, and the end of the whole vectors in n
// values: loops run [0, vector_end) by vectors and [vector_end, n) one by one.
inline Vec load(const float* p) { return Vec::load_unaligned(p); }
inline void store(float* p, const Vec& v) { v.store_unaligned(p); }
inline constexpr std::size_t vector_end(std::size_t n) { return n - n % kLanes; }

// a b + c, and c - a b, written as xsimd 8.1 writes them for AVX-512 (it
// has no AVX-512 fma): a product and a sum, which the compiler fuses where
// it contracts floating-point expressions (GCC's default in GNU mode), as it
// did xsimd's. Fused instructions here would round RoPE's two products
// otherwise than every native build before them did.
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline Vec fnma(Vec a, Vec b, Vec c) { return -a * b + c; }
inline Vec max(Vec a, Vec b) { return _mm512_max_ps(a.data, b.data); }
inline Vec select(VecMask m, Vec yes, Vec no) { return _mm512_mask_blend_ps(m.data, no.data, yes.data); }
inline bool any(VecMask m) { return m.data != 0; }

// Lanes rounded to the nearest integer (ties to even), and x 2^k for lanes k
// that hold integers in the exponent's range: exp's reduction and scaling.
inline Vec round_nearest(Vec v) { return _mm512_roundscale_ps(v.data, _MM_FROUND_TO_NEAREST_INT); }
inline Vec times_pow2(Vec x, Vec k) {
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k.data), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(x.data, _mm512_castsi512_ps(e));
}

// The sum of the lanes: the halves added, then their halves, then pairs.
inline float hadd(Vec v) {
  const __m256 s8 = _mm256_add_ps(_mm512_extractf32x8_ps(v.data, 1), _mm512_extractf32x8_ps(v.data, 0));
  const __m128 s4 = _mm_add_ps(_mm256_extractf128_ps(s8, 1), _mm256_castps256_ps128(s8));
  const __m128 s2 = _mm_hadd_ps(s4, s4);
  return _mm_cvtss_f32(_mm_hadd_ps(s2, s2));
}

namespace detail {
// Rows a and b to [a's 256-bit halves added | b's].
inline __m512 sum_halves(Vec a, Vec b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a.data, b.data, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a.data, b.data, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Eight rows r0..r7, given as sum_halves of (r0, r4), (r2, r6), (r1, r5),
// (r3, r7), to their sums in order: their quarters added ([r0 r4 r2 r6] and
// [r1 r5 r3 r7], a 128-bit block each), then pairs of lanes, so that each
// 128-bit block holds two rows' last two sums ([r0 r1] [r4 r5] [r2 r3]
// [r6 r7]), which hadd_ps adds into rows 0-7.
inline __m256 sum_eight(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 even =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 odd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 pairs =
      _mm512_add_ps(_mm512_shuffle_ps(even, odd, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(even, odd, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_hadd_ps(_mm512_castps512_ps256(pairs), _mm512_extractf32x8_ps(pairs, 1));
}
}  // namespace detail

// Lane i: the sum of rows[i]'s lanes (a transposing reduction), each row
// summed in hadd's order: a row's two halves, their two halves, pairs.
inline Vec sum_each(const Vec* r) {
  using detail::sum_halves;
  const __m256 lo =
      detail::sum_eight(sum_halves(r[0], r[4]), sum_halves(r[2], r[6]), sum_halves(r[1], r[5]), sum_halves(r[3], r[7]));
  const __m256 hi =
      detail::sum_eight(sum_halves(r[8], r[12]), sum_halves(r[10], r[14]), sum_halves(r[9], r[13]), sum_halves(r[11], r[15]));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...): RoPE's pairs swapped.
inline Vec swap_pairs(Vec v) { return _mm512_permute_ps(v.data, _MM_SHUFFLE(2, 3, 0, 1)); }

// Keeps v in a register from here on (kernels::in_register's reason: ops/simd.hpp).
inline void in_register(Vec& v) { asm("" : "+v"(v.data)); }

// Lanes from a cache's compact rows (quant/kv_types.hpp): 16 halves, 16
// bfloat16s, 16 int8s, or 16 nibbles (low or high) less 8, as floats.
inline Vec load_f16(const std::uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline Vec load_bf16(const std::uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline Vec load_i8(const std::int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline float f16_scalar(std::uint16_t h) { return _cvtsh_ss(h); }  // a block's scale, by F16C
inline Vec load_nibbles(const std::uint8_t* p, bool high) {
  __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  q = high ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, _mm512_set1_epi32(15));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8)));
}

#include "streamllm/kernels/simd/exp-inl.hpp"  // IWYU pragma: keep

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS
STREAMLLM_END_TARGET

#endif  // STREAMLLM_HAVE_X86_KERNELS
