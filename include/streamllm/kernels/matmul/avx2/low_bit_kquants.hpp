// AVX2 decode of Q2_K and Q3_K rows against int8 activations with one
// scale per 256 (the row's quantize: quantize_activations_per_256). A
// vector of 32 quants is one activation block and two of the format's
// blocks of 16, one per 128-bit half: vpmaddubsw multiplies the quants with
// the activations, and vpmaddwd by a vector holding each half's scale
// (int16) adds the pairs scaled. The activations' one scale lets a
// super-block's eight vectors of sums be added as they are and scaled by
// d dx once; with a scale per 32 they were reduced across lanes first
// (reduce8, lane j: block j), a third of the integer work of a super-block
// of Q2_K. Q2_K's mins: one vpmaddwd of the sixteen mins with the
// token's sums per 16 (computed once per call), times dmin dx; taken from the
// activations per row instead (a vpmaddubsw per vector) they doubled the
// work. Q3_K's offset of 4 is taken off the same way, its scales times 4
// times the sums (the sign trick Q8_0 takes cost 16 more operations per
// super-block and token).
#pragma once

#include <cstring>
#include <vector>

#include "streamllm/kernels/matmul/avx2/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

// Vector j (elements 32j..32j+31) of a Q2_K / Q3_K qs: bits 2(j % 4) of
// bytes 32(j / 4)...
STREAMLLM_AVX2 inline __m256i low2_bits(const std::uint8_t* qs, int j) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (j / 4)));
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (j % 4))), _mm256_set1_epi8(3));
}

// Vector j of a Q3_K block's quants as stored, q + 4 (0..7): bit j of
// hmask[l] is element 32j + l's third bit, moved to bit 2 by one 16-bit
// shift (of at most 5: each byte's bit 2 comes from the same byte).
STREAMLLM_AVX2 inline __m256i q3k_unsigned_quants(const quant::BlockQ3K& b, __m256i hmask, int j) {
  const __m256i at2 =
      j < 2 ? _mm256_sll_epi16(hmask, _mm_cvtsi32_si128(2 - j)) : _mm256_srl_epi16(hmask, _mm_cvtsi32_si128(j - 2));
  return _mm256_or_si256(low2_bits(b.qs, j), _mm256_and_si256(at2, _mm256_set1_epi8(4)));
}

// quant::q3k_scales less 32, as sixteen int8: scale j is the nibble of
// byte j % 8 (low for j < 8, high after) and, above it, bits 2(j / 4) of
// byte 8 + j % 4. (One at a time, the scales cost more than the products.)
STREAMLLM_AVX2 inline __m128i q3k_scales_i8(const std::uint8_t* packed) {
  std::int32_t last;  // bytes 8-11: the block ends 2 bytes past them, so no 16-byte load
  std::memcpy(&last, packed + 8, 4);
  const __m128i v = _mm_insert_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed)), last, 2);
  const __m128i m4 = _mm_set1_epi8(0xF);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  const __m128i h = _mm_shuffle_epi8(v, _mm_set_epi8(11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8));
  const __m128i three = _mm_set1_epi8(3);
  const __m128i g0 = _mm_set_epi32(0, 0, 0, -1), g1 = _mm_set_epi32(0, 0, -1, 0), g2 = _mm_set_epi32(0, -1, 0, 0),
                g3 = _mm_set_epi32(-1, 0, 0, 0);  // lanes 4k..4k+3: shift 2k
  const __m128i high =
      _mm_and_si128(_mm_or_si128(_mm_or_si128(_mm_and_si128(h, g0), _mm_and_si128(_mm_srli_epi16(h, 2), g1)),
                                 _mm_or_si128(_mm_and_si128(_mm_srli_epi16(h, 4), g2), _mm_and_si128(_mm_srli_epi16(h, 6), g3))),
                    three);
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

// Each token's sums of its quants in runs of 16, for Q2_K's mins and Q3_K's
// offset: tokens [0, nt) of xa, sums[t][k / 16]. Once per call, not once per row.
STREAMLLM_AVX2 inline const std::int16_t* quant_sums16(const QuantizedActivations::Slice& xa, std::size_t nt) {
  static thread_local std::vector<std::int16_t> sums;
  const std::size_t runs = xa.cols() / 16;
  sums.resize(nt * runs);
  for (std::size_t t = 0; t < nt; ++t)
    for (std::size_t i = 0; i < runs; ++i) sums[t * runs + i] = static_cast<std::int16_t>(sum_of_16(xa.q_row(t) + 16 * i));
  return sums.data();
}

// A super-block's integer sums (activations with one scale per 256) into
// each token's accumulator: d dx sums - dmin dx (mins16 . the token's sums
// per 16), mins16 holding the mins (Q2_K's per 16, Q4_K's per 32 doubled).
template <int NT>
STREAMLLM_AVX2 inline void add_affine_per_256(const QuantizedActivations::Slice& xa, std::size_t sb, const std::int16_t* sums16,
                                              __m256 d, __m256 dmin, __m256i mins16, const __m256i (&sums)[NT],
                                              __m256 (&acc)[NT]) {
  const std::size_t runs = xa.cols() / 16;
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const __m256i mins =
        _mm256_madd_epi16(mins16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums16 + tt * runs + 16 * sb)));
    const __m256 dx = _mm256_broadcast_ss(xa.d_row(tt) + 8 * sb);  // the super-block's one scale
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[t]), _mm256_mul_ps(d, dx), acc[t]);
    acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, dx), acc[t]);
  }
}

// Super-block sb of a Q2_K row against NT tokens; sums16: quant_sums16's.
// The mins (sixteen of 4 bits) multiply the tokens' sums per 16 in one
// vpmaddwd, lane i holding block i's pair.
template <int NT>
STREAMLLM_AVX2 inline void q2k_super_block(const quant::BlockQ2K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           const std::int16_t* sums16, __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), m4 = _mm_set1_epi8(0xF);
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
  __m256i sums[NT];
  for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    __m256i q[4], scales16[4];
    sub_block_scales16_half(_mm_and_si128(packed, m4), h, scales16);
    for (int j = 0; j < 4; ++j) q[j] = low2_bits(b.qs, 4 * h + j);
    add_scaled_half<NT>(xa, sb, h, q, scales16, sums);
  }
  add_affine_per_256<NT>(xa, sb, sums16, d, dmin, mins16, sums, acc);
}

// Super-block sb of a Q3_K row against NT tokens; sums16: quant_sums16's.
// The quants as stored, q + 4 (0..7), are vpmaddubsw's unsigned operand as
// they are; the 4 x scale x sum of each sub-block of 16 comes off after, in
// one vpmaddwd of the scales with the token's sums per 16.
template <int NT>
STREAMLLM_AVX2 inline void q3k_super_block(const quant::BlockQ3K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           const std::int16_t* sums16, __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
  const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
  const __m128i scales = q3k_scales_i8(b.scales);
  const __m256i scales_x4 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales), 2);
  const std::size_t runs = xa.cols() / 16;
  __m256i sums[NT];
  for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    __m256i q[4], scales16[4];
    sub_block_scales16_half(scales, h, scales16);
    for (int j = 0; j < 4; ++j) q[j] = q3k_unsigned_quants(b, hmask, 4 * h + j);
    add_scaled_half<NT>(xa, sb, h, q, scales16, sums);
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const __m256i offsets =
        _mm256_madd_epi16(scales_x4, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums16 + tt * runs + 16 * sb)));
    const __m256i isum = _mm256_sub_epi32(sums[t], offsets);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_broadcast_ss(xa.d_row(tt) + 8 * sb)), acc[t]);
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
