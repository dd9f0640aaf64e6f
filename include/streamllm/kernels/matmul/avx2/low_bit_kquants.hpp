// AVX2 decode of Q2_K and Q3_K rows against int8 activations. A vector of
// 32 quants is one activation block and two of the format's blocks of 16,
// one per 128-bit half: vpmaddubsw multiplies the quants with the
// activations, and vpmaddwd by a vector holding each half's scale (int16)
// adds the pairs scaled. A super-block's eight sums are reduced together
// (lane j: activation block j) and scaled by d dx at once, as the Q4_K
// kernel does. Q2_K's mins: one more vpmaddubsw of the mins (as bytes, one
// per half) with the activations, times dmin dx. Q3_K's quants, -4..3, take
// Q8_0's sign trick.
#pragma once

#include <cstring>

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
// hmask[l] is element 32j + l's third bit, and 16-bit shifts of up to 7
// leave each byte's bit j at its bit 0.
STREAMLLM_AVX2 inline __m256i q3k_unsigned_quants(const quant::BlockQ3K& b, __m256i hmask, int j) {
  const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hmask, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_add_epi8(low2_bits(b.qs, j), _mm256_slli_epi16(high, 2));
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

template <int NT>
STREAMLLM_AVX2 inline void q2k_super_block(const quant::BlockQ2K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), m4 = _mm_set1_epi8(0xF);
  const __m256i min_bytes = _mm256_broadcastsi128_si256(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
  __m256i q[8], scales16[8], mins8[8];
  sub_block_scales16(_mm_and_si128(packed, m4), scales16);
  for (int j = 0; j < 8; ++j) {
    q[j] = low2_bits(b.qs, j);
    // sub-block 2j's min in the low half, 2j + 1's in the high one
    mins8[j] = _mm256_shuffle_epi8(
        min_bytes, _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(2 * j + 1)), _mm_set1_epi8(static_cast<char>(2 * j))));
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 256 * sb;
    __m256i dots[8], mins[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * j));
      dots[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], x), scales16[j]);
      mins[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(mins8[j], x), ones);
    }
    const __m256 dx = _mm256_loadu_ps(xa.d_row(tt) + 8 * sb);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(dots)), _mm256_mul_ps(d, dx), acc[t]);
    acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(reduce8(mins)), _mm256_mul_ps(dmin, dx), acc[t]);
  }
}

template <int NT>
STREAMLLM_AVX2 inline void q3k_super_block(const quant::BlockQ3K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
  const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
  __m256i q[8], q_abs[8], scales16[8];
  sub_block_scales16(q3k_scales_i8(b.scales), scales16);
  for (int j = 0; j < 8; ++j) {
    q[j] = _mm256_sub_epi8(q3k_unsigned_quants(b, hmask, j), _mm256_set1_epi8(4));  // -4..3
    q_abs[j] = _mm256_sign_epi8(q[j], q[j]);
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 256 * sb;
    __m256i dots[8];
    for (int j = 0; j < 8; ++j) dots[j] = kquant_dot(q_abs[j], q[j], xq + 32 * j, scales16[j], true);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(dots)), _mm256_mul_ps(d, _mm256_loadu_ps(xa.d_row(tt) + 8 * sb)), acc[t]);
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
