// What every AVX2 kernel shares: the target attribute they are compiled with
// whatever the build flags (chosen at run time, Isa::Avx2, as the AVX-512
// kernels are), and horizontal sums. These kernels serve x86 CPUs without
// AVX-512 (or whose hypervisor hides it): without them a portable build read
// every type through the scalar loops, at a fraction of the memory's speed.
#pragma once

#include "streamllm/kernels/simd/target.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS
#define STREAMLLM_HAVE_AVX2_KERNELS 1

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "streamllm/core/dtype.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/quant/blocks.hpp"

#endif

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

STREAMLLM_AVX2 inline float hsum(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// The sum of 16 int8 quants (SSE2, so the scalar packing code can call it):
// vpsadbw sums unsigned bytes, so flip the signs (+128 each) and take 16 x 128 back.
inline std::int32_t sum_of_16(const std::int8_t* q) {
  const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), _mm_set1_epi8(-128));
  const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
  return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

// Lane j: the sum of the eight lanes of v[j], as join_halves of the two
// halves' reduce4: each 128-bit lane of reduce4 holds, lane j, the sum of
// that half of v[j].
STREAMLLM_AVX2 inline __m256i reduce4(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
}
STREAMLLM_AVX2 inline __m256i join_halves(__m256i a, __m256i b) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
STREAMLLM_AVX2 inline __m256i reduce8(const __m256i (&v)[8]) {
  return join_halves(reduce4(v[0], v[1], v[2], v[3]), reduce4(v[4], v[5], v[6], v[7]));
}

// 32 quants against one activation block, the pair sums scaled (vpmaddwd)
// by scales16: unsigned quants as they are, or signed ones (signed_q) as
// their magnitudes q_abs against the activations given their signs.
STREAMLLM_AVX2 inline __m256i kquant_dot(__m256i q_abs, __m256i q_signs, const std::int8_t* xq, __m256i scales16, bool signed_q) {
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if (signed_q) x = _mm256_sign_epi8(x, q_signs);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q_abs, x), scales16);
}

// Sixteen int8 scales, one per sub-block of 16, as vpmaddwd operands:
// vector j's halves hold scales 2j and 2j + 1 as int16. The four vectors of
// half h of a super-block (j = 4h..4h+3): the decode kernels go by halves
// (add_scaled_half, scaled_half_sums), as eight vectors of quants and eight
// of scales at once took more than AVX2's sixteen registers.
STREAMLLM_AVX2 inline void sub_block_scales16_half(__m128i scales, int h, __m256i (&out)[4]) {
  const __m256i s16 = _mm256_cvtepi8_epi16(scales);
  const __m256i src = h == 0 ? _mm256_permute2x128_si256(s16, s16, 0x00) : _mm256_permute2x128_si256(s16, s16, 0x11);
  for (int j = 0; j < 4; ++j) {  // int16 lanes 2j and 2j + 1 of src
    const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x0202 * (2 * j + 1) + 0x0100)),
                                          _mm_set1_epi16(static_cast<short>(0x0202 * 2 * j + 0x0100)));
    out[j] = _mm256_shuffle_epi8(src, pick);
  }
}

// Half h of a super-block (vectors 4h..4h+3 of unsigned quants q, their
// vpmaddwd scales) against NT tokens whose activations have a scale per 32:
// each token's four scaled sums reduce4'd into halves[h][t], which
// join_halves(halves[0][t], halves[1][t]) makes block j's sum in lane j.
template <int NT>
STREAMLLM_AVX2 inline void scaled_half_sums(const QuantizedActivations::Slice& xa, std::size_t sb, int h, const __m256i (&q)[4],
                                            const __m256i (&scales16)[4], __m256i (&halves)[2][NT]) {
  for (int t = 0; t < NT; ++t) {
    const std::int8_t* xq = xa.q_row(static_cast<std::size_t>(t)) + 256 * sb + 128 * static_cast<std::size_t>(h);
    __m256i dots[4];
    for (int j = 0; j < 4; ++j) dots[j] = kquant_dot(q[j], q[j], xq + 32 * j, scales16[j], false);
    halves[h][t] = reduce4(dots[0], dots[1], dots[2], dots[3]);
  }
}

// Half h of a super-block (vectors 4h..4h+3 of unsigned quants q, their
// vpmaddwd scales) against NT tokens, added to each token's integer sums
// lane by lane: for activations with one scale per super-block.
template <int NT>
STREAMLLM_AVX2 inline void add_scaled_half(const QuantizedActivations::Slice& xa, std::size_t sb, int h, const __m256i (&q)[4],
                                           const __m256i (&scales16)[4], __m256i (&sums)[NT]) {
  for (int t = 0; t < NT; ++t) {
    const std::int8_t* xq = xa.q_row(static_cast<std::size_t>(t)) + 256 * sb + 128 * static_cast<std::size_t>(h);
    for (int j = 0; j < 4; ++j) sums[t] = _mm256_add_epi32(sums[t], kquant_dot(q[j], q[j], xq + 32 * j, scales16[j], false));
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
