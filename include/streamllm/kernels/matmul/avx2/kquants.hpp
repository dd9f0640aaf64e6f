// AVX2 decode of K-quant rows (Q4_K, Q5_K, Q6_K) against int8 activations,
// and the one row loop of every type of 256-element super-blocks (with Q2_K
// and Q3_K of low_bit_kquants.hpp, IQ4_XS of nonlinear_blocks.hpp).
#pragma once

#include "streamllm/kernels/matmul/avx2/isa.hpp"
#include "streamllm/kernels/matmul/avx2/low_bit_kquants.hpp"
#include "streamllm/kernels/matmul/avx2/nonlinear_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

// ---- Q4_K / Q5_K / Q6_K rows x int8 activations -----------------------------
//
// Per vector of 32 quants (one activation block): vpmaddubsw with the
// activations, then vpmaddwd by the sub-block scales (int16) instead of by
// ones, so the integer sums come out scaled. A super-block's eight vectors
// are reduced together, lane j to the sum of vector j (reduce8), so that the
// float work - convert, times d x the eight activation scales, add - is one
// vector per super-block and token instead of one per block. Q4_K's nibbles
// are unsigned (0..15; Q5_K's quants 0..31 likewise); its mins, dmin m dx x
// the activation block's sum, are one more vector. Q6_K's quants go in as
// stored (0..63) and its offset of 32 comes off through the tokens' sums per
// 16; a vector spans two sub-blocks of 16, whose scales fill its halves.
// Q4_K takes activations with one scale per 256 (rows.hpp), its sums added
// without the reduction.
// Scaling per block instead, and unpacking the scales one by one, were both
// slower.

// Half h of a Q4_K super-block's nibbles (qs) as bytes 0..15, q[c] =
// elements 128h + 32c..128h + 32c + 31.
STREAMLLM_AVX2 inline void nibbles_half(const std::uint8_t* qs, int h, __m256i (&q)[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 2; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 64 * h + 32 * c));
    q[2 * c] = _mm256_and_si256(v, m4);
    q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

STREAMLLM_AVX2 inline void q4k_quants_half(const quant::BlockQ4K& b, int h, __m256i (&q)[4]) { nibbles_half(b.qs, h, q); }

// Half h of a Q5_K super-block's quants as bytes 0..31: Q4_K's nibbles, and
// bit j of qh[l] moved to bit 4 of element 32j + l.
STREAMLLM_AVX2 inline void q5k_quants_half(const quant::BlockQ5K& b, int h, __m256i (&q)[4]) {
  nibbles_half(b.qs, h, q);
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)), bit4 = _mm256_set1_epi8(0x10);
  for (int c = 0; c < 4; ++c) {
    const int j = 4 * h + c;
    // 16-bit shifts: bit 4 of each byte comes from the same byte (shifts of at most 4)
    const __m256i at4 =
        j < 4 ? _mm256_sll_epi16(bits, _mm_cvtsi32_si128(4 - j)) : _mm256_srl_epi16(bits, _mm_cvtsi32_si128(j - 4));
    q[c] = _mm256_or_si256(q[c], _mm256_and_si256(at4, bit4));
  }
}

// Half h of a Q6_K super-block's quants as bytes 0..63 (before the -32),
// q[c] = elements 128h + 32c..128h + 32c + 31 (the layout
// gemv_kquant_int8 spells out).
STREAMLLM_AVX2 inline void q6k_quants_half(const quant::BlockQ6K& b, int h, __m256i (&q)[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), m30));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 2), m30));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hi, m30));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hi, 2), m30));
}

// A whole super-block's quants, q[j] = elements 32j..32j+31, from its
// halves: for the tiles, which unpack a super-block once for many tokens.
template <class Block, void (*Half)(const Block&, int, __m256i (&)[4])>
STREAMLLM_AVX2 inline void whole_super_block(const Block& b, __m256i (&q)[8]) {
  __m256i half[4];
  for (int h = 0; h < 2; ++h) {
    Half(b, h, half);
    for (int c = 0; c < 4; ++c) q[4 * h + c] = half[c];
  }
}
STREAMLLM_AVX2 inline void q4k_quants(const quant::BlockQ4K& b, __m256i (&q)[8]) {
  whole_super_block<quant::BlockQ4K, q4k_quants_half>(b, q);
}
STREAMLLM_AVX2 inline void q5k_quants(const quant::BlockQ5K& b, __m256i (&q)[8]) {
  whole_super_block<quant::BlockQ5K, q5k_quants_half>(b, q);
}
STREAMLLM_AVX2 inline void q6k_quants(const quant::BlockQ6K& b, __m256i (&q)[8]) {
  whole_super_block<quant::BlockQ6K, q6k_quants_half>(b, q);
}

// Q4_K's and Q5_K's eight 6-bit scales (quant::q4k_scales_mins_bytes) as
// int16 in each 128-bit half of sc; half h's four vpmaddwd operands, scale
// 4h + j spread over vector j by one byte shuffle.
STREAMLLM_AVX2 inline __m256i q4k_scales_int16(const quant::Q4KScalesMins& p) {
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(p.scales))));
}
STREAMLLM_AVX2 inline void q4k_scales16_half(__m256i sc, int h, __m256i (&out)[4]) {
  for (int j = 0; j < 4; ++j)
    out[j] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<short>(0x0202 * (4 * h + j) + 0x0100)));
}

// Super-block sb of a Q5_K row against NT tokens, half a super-block at a
// time (scaled_half_sums); the mins widened to float.
template <int NT>
STREAMLLM_AVX2 inline void q5k_super_block(const quant::BlockQ5K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
  const __m256i sc = q4k_scales_int16(p);
  const __m256 dmin_m =
      _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(p.mins)))));
  __m256i halves[2][NT];
  for (int h = 0; h < 2; ++h) {
    __m256i q[4], scales16[4];
    q5k_quants_half(b, h, q);
    q4k_scales16_half(sc, h, scales16);
    scaled_half_sums<NT>(xa, sb, h, q, scales16, halves);
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const __m256 dx = _mm256_loadu_ps(xa.d_row(tt) + 8 * sb);
    const __m256 block_sums = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.sum_row(tt) + 8 * sb)));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(join_halves(halves[0][t], halves[1][t])), _mm256_mul_ps(d, dx), acc[t]);
    acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin_m, dx), block_sums, acc[t]);
  }
}

// Super-block sb of a Q4_K row against NT tokens whose activations have one
// scale per 256 (sums16: quant_sums16's): the eight vectors of scaled sums
// are added as they are, half a super-block at a time (add_scaled_half),
// where the scale per 32 needed them reduced lane by lane (reduce8: six
// hadds and two permutes a token); the mins, one vpmaddwd of each pair of
// them (doubled, one per half of 16) with the token's sums per 16.
template <int NT>
STREAMLLM_AVX2 inline void q4k_super_block_per_256(const quant::BlockQ4K& b, const QuantizedActivations::Slice& xa,
                                                   std::size_t sb, const std::int16_t* sums16, __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
  const __m256i sc = q4k_scales_int16(p);
  const __m128i mins8 = _mm_cvtsi64_si128(static_cast<long long>(p.mins));
  const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins8, mins8));  // m0 m0 m1 m1 ... m7 m7
  __m256i sums[NT];
  for (int t = 0; t < NT; ++t) sums[t] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    __m256i q[4], scales16[4];
    q4k_quants_half(b, h, q);
    q4k_scales16_half(sc, h, scales16);
    add_scaled_half<NT>(xa, sb, h, q, scales16, sums);
  }
  add_affine_per_256<NT>(xa, sb, sums16, d, dmin, mins16, sums, acc);
}

// Super-block sb of a Q6_K row against NT tokens; sums16: quant_sums16's.
// The quants as stored, q + 32 (0..63), are vpmaddubsw's unsigned operand as
// they are (pair sums of at most 2 x 63 x 127); the 32 x scale x sum of each
// sub-block of 16 comes off after, one vpmaddwd a token whose lane j is
// block j's, as reduce8 leaves them. (Signed quants took the sign trick: a
// vpsignb per vector and token.)
template <int NT>
STREAMLLM_AVX2 inline void q6k_super_block(const quant::BlockQ6K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           const std::int16_t* sums16, __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
  const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  const __m256i scales_x32 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales), 5);
  const std::size_t runs = xa.cols() / 16;
  __m256i halves[2][NT];
  for (int h = 0; h < 2; ++h) {
    __m256i q[4], scales16[4];
    q6k_quants_half(b, h, q);
    sub_block_scales16_half(scales, h, scales16);
    scaled_half_sums<NT>(xa, sb, h, q, scales16, halves);
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const __m256i offsets =
        _mm256_madd_epi16(scales_x32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums16 + tt * runs + 16 * sb)));
    const __m256i isum = _mm256_sub_epi32(join_halves(halves[0][t], halves[1][t]), offsets);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_loadu_ps(xa.d_row(tt) + 8 * sb)), acc[t]);
  }
}

// Rows [r0, r1) of a matrix of type T against NT tokens: one type per
// loop, so that its super-block kernel is inlined into it, its constants
// and the tokens' sums kept in registers. (A switch on the type per
// super-block left each kernel a call of its own, its sums passed through
// memory; flatten, for Q6_K's kernel, which the compiler would still call.)
template <int NT, DType T>
STREAMLLM_AVX2 __attribute__((flatten)) inline void kquant_rows(std::size_t r0, std::size_t r1, const std::byte* w,
                                                                std::size_t row_bytes, const QuantizedActivations::Slice& xa,
                                                                float* y, std::size_t ldy) {
  const std::size_t super_blocks = xa.cols() / 256;
  constexpr bool kSums16 = T == DType::Q2_K || T == DType::Q3_K || T == DType::Q4_K || T == DType::Q6_K;
  const std::int16_t* sums16 = kSums16 ? quant_sums16(xa, NT) : nullptr;
  for (std::size_t r = r0; r < r1; ++r) {
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const std::byte* row = w + r * row_bytes;
    for (std::size_t sb = 0; sb < super_blocks; ++sb) {
      if constexpr (T == DType::Q4_K)
        q4k_super_block_per_256<NT>(reinterpret_cast<const quant::BlockQ4K*>(row)[sb], xa, sb, sums16, acc);
      else if constexpr (T == DType::Q5_K)
        q5k_super_block<NT>(reinterpret_cast<const quant::BlockQ5K*>(row)[sb], xa, sb, acc);
      else if constexpr (T == DType::Q2_K)
        q2k_super_block<NT>(reinterpret_cast<const quant::BlockQ2K*>(row)[sb], xa, sb, sums16, acc);
      else if constexpr (T == DType::Q3_K)
        q3k_super_block<NT>(reinterpret_cast<const quant::BlockQ3K*>(row)[sb], xa, sb, sums16, acc);
      else if constexpr (T == DType::IQ4_XS)
        iq4xs_super_block<NT>(reinterpret_cast<const quant::BlockIQ4XS*>(row)[sb], xa, sb, acc);
      else
        q6k_super_block<NT>(reinterpret_cast<const quant::BlockQ6K*>(row)[sb], xa, sb, sums16, acc);
    }
    for (int t = 0; t < NT; ++t) y[static_cast<std::size_t>(t) * ldy + r] = hsum(acc[t]);
  }
}

// Rows [r0, r1) of a Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS matrix against NT tokens.
template <int NT>
STREAMLLM_AVX2 inline void gemv_kquant_rows(DType type, std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                            const QuantizedActivations::Slice& xa, float* y, std::size_t ldy) {
  switch (type) {
    case DType::Q4_K: return kquant_rows<NT, DType::Q4_K>(r0, r1, w, row_bytes, xa, y, ldy);
    case DType::Q5_K: return kquant_rows<NT, DType::Q5_K>(r0, r1, w, row_bytes, xa, y, ldy);
    case DType::Q2_K: return kquant_rows<NT, DType::Q2_K>(r0, r1, w, row_bytes, xa, y, ldy);
    case DType::Q3_K: return kquant_rows<NT, DType::Q3_K>(r0, r1, w, row_bytes, xa, y, ldy);
    case DType::IQ4_XS: return kquant_rows<NT, DType::IQ4_XS>(r0, r1, w, row_bytes, xa, y, ldy);
    default: return kquant_rows<NT, DType::Q6_K>(r0, r1, w, row_bytes, xa, y, ldy);
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
