// The AVX2 family's vector: 8 floats in a ymm register, with the operations
// the ops are written over (ops/*-inl.hpp). Compiled for AVX2 and FMA
// whatever the build's flags (target.hpp). Each operation does the arithmetic
// xsimd's AVX2 batch does, in the same order, so a build for an AVX2 CPU
// gives the same bits through either.
#pragma once

#include "streamllm/kernels/simd/target.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

STREAMLLM_BEGIN_TARGET(STREAMLLM_AVX2_TARGET)

namespace streamllm::kernels::avx2 {

// Which lanes a comparison held in: all ones or all zeros per lane.
struct VecMask {
  __m256 data;
  VecMask operator&(VecMask o) const { return {_mm256_and_ps(data, o.data)}; }
};

struct Vec {
  static constexpr std::size_t size = 8;
  using batch_bool_type = VecMask;
  __m256 data;

  Vec() = default;
  Vec(__m256 v) : data(v) {}                 // NOLINT(google-explicit-constructor): a register is a Vec
  Vec(float x) : data(_mm256_set1_ps(x)) {}  // NOLINT(google-explicit-constructor): every lane x

  static Vec load_unaligned(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load_aligned(const float* p) { return _mm256_load_ps(p); }
  void store_unaligned(float* p) const { _mm256_storeu_ps(p, data); }
  void store_aligned(float* p) const { _mm256_store_ps(p, data); }

  Vec operator+(Vec o) const { return _mm256_add_ps(data, o.data); }
  Vec operator-(Vec o) const { return _mm256_sub_ps(data, o.data); }
  Vec operator*(Vec o) const { return _mm256_mul_ps(data, o.data); }
  Vec operator/(Vec o) const { return _mm256_div_ps(data, o.data); }
  Vec operator-() const { return _mm256_xor_ps(data, _mm256_set1_ps(-0.0f)); }  // the sign flipped, as xsimd
  Vec& operator+=(Vec o) { return *this = *this + o; }

  VecMask operator>(Vec o) const { return {_mm256_cmp_ps(data, o.data, _CMP_GT_OQ)}; }
  VecMask operator>=(Vec o) const { return {_mm256_cmp_ps(data, o.data, _CMP_GE_OQ)}; }
  VecMask operator<=(Vec o) const { return {_mm256_cmp_ps(data, o.data, _CMP_LE_OQ)}; }
};

inline constexpr std::size_t kLanes = Vec::size;

// Loads and stores of any alignment, and the end of the whole vectors in n
// values: loops run [0, vector_end) by vectors and [vector_end, n) one by one.
inline Vec load(const float* p) { return Vec::load_unaligned(p); }
inline void store(float* p, const Vec& v) { v.store_unaligned(p); }
inline constexpr std::size_t vector_end(std::size_t n) { return n - n % kLanes; }

inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a.data, b.data, c.data); }    // a b + c
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a.data, b.data, c.data); }  // c - a b
inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a.data, b.data); }
inline Vec select(VecMask m, Vec yes, Vec no) { return _mm256_blendv_ps(no.data, yes.data, m.data); }
inline bool any(VecMask m) { return _mm256_testz_ps(m.data, m.data) == 0; }

// Lanes rounded to the nearest integer (ties to even), and x 2^k for lanes k
// that hold integers in the exponent's range: exp's reduction and scaling.
inline Vec round_nearest(Vec v) { return _mm256_round_ps(v.data, _MM_FROUND_TO_NEAREST_INT); }
inline Vec times_pow2(Vec x, Vec k) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k.data), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(x.data, _mm256_castsi256_ps(e));
}

// The sum of the lanes: lane j and j + 4 added, then pairs of those.
inline float hadd(Vec v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v.data), _mm256_extractf128_ps(v.data, 1));
  const __m128 s2 = _mm_hadd_ps(s4, s4);
  return _mm_cvtss_f32(_mm_hadd_ps(s2, s2));
}

// Lane i: the sum of rows[i]'s lanes (a transposing reduction): pairs, then
// each half's four, then the halves.
inline Vec sum_each(const Vec* rows) {
  // Per 128-bit half: the four-lane sums of rows 0-3 (a) and of rows 4-7 (b).
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(rows[0].data, rows[1].data), _mm256_hadd_ps(rows[2].data, rows[3].data));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(rows[4].data, rows[5].data), _mm256_hadd_ps(rows[6].data, rows[7].data));
  // Lane i < 4: row i's low half plus its high half; lanes 4-7 the same for rows 4-7.
  return _mm256_add_ps(_mm256_blend_ps(a, b, 0xF0), _mm256_permute2f128_ps(a, b, 0x21));
}

// (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...): RoPE's pairs swapped.
inline Vec swap_pairs(Vec v) { return _mm256_permute_ps(v.data, _MM_SHUFFLE(2, 3, 0, 1)); }

// Keeps v in a register from here on (kernels::in_register's reason: ops/simd.hpp).
inline void in_register(Vec& v) { asm("" : "+v"(v.data)); }

// Lanes from a cache's compact rows (quant/kv_types.hpp): 8 halves, 8
// bfloat16s, 8 int8s, or 8 nibbles (low or high) less 8, as floats.
inline Vec load_f16(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline Vec load_bf16(const std::uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline Vec load_i8(const std::int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float f16_scalar(std::uint16_t h) { return _cvtsh_ss(h); }  // a block's scale, by F16C
inline Vec load_nibbles(const std::uint8_t* p, bool high) {
  __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  q = high ? _mm256_srli_epi32(q, 4) : _mm256_and_si256(q, _mm256_set1_epi32(15));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8)));
}

#include "streamllm/kernels/simd/exp-inl.hpp"  // IWYU pragma: keep

}  // namespace streamllm::kernels::avx2

STREAMLLM_END_TARGET

#endif  // STREAMLLM_HAVE_X86_KERNELS
