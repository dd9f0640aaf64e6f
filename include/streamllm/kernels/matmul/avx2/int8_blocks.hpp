// AVX2 decode of the blocks of 32 (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) against
// int8 activations (vpmaddubsw).
#pragma once

#include "streamllm/kernels/matmul/avx2/isa.hpp"
#include "streamllm/kernels/matmul/x86_rows.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

// ---- Q8_0 / Q4_0 rows x int8 activations (vpmaddubsw) -----------------------
//
// vpmaddubsw multiplies unsigned by signed bytes: Q8_0's magnitudes |w| go in
// as the unsigned operand and the activations take the weights' signs
// (vpsignb), so each product is |w| x sign(w) x = w x. A pair of products
// stays within int16 (|w| <= 128, |x| <= 127), vpmaddwd by ones adds pairs
// into int32 lanes, and each block is scaled once: dw dx. One row at a time:
// the rows are one sequential stream, which the hardware prefetcher
// follows: a software prefetch of every block made decode slower.

// Block b of a row against NT tokens, added to acc; the offsets (kOffset,
// kMin) in scalars, added to extra.
template <class Row, int NT>
STREAMLLM_AVX2 inline void int8_block(const typename Row::Block& blk, const QuantizedActivations::Slice& xa, std::size_t b,
                                      __m256 (&acc)[NT], float (&extra)[NT]) {
  const __m256i q = Row::quants(blk);
  const __m256i q_abs = Row::kSigned ? _mm256_sign_epi8(q, q) : q;
  const __m256i ones = _mm256_set1_epi16(1);
  const float dw = _cvtsh_ss(blk.d);
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.q_row(tt) + 32 * b));
    if constexpr (Row::kSigned) x = _mm256_sign_epi8(x, q);
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(q_abs, x), ones));
    const float scale = dw * xa.d_row(tt)[b];
    acc[t] = _mm256_fmadd_ps(s, _mm256_set1_ps(scale), acc[t]);
    if constexpr (Row::kOffset != 0) extra[t] -= Row::kOffset * scale * static_cast<float>(xa.sum_row(tt)[b]);
    if constexpr (Row::kMin) extra[t] += _cvtsh_ss(blk.m) * xa.dsum_row(tt)[b];
  }
}

// The f16 field of eight blocks as one vector of floats.
template <class Block>
STREAMLLM_AVX2 inline __m256 halves8(const Block* blk, std::uint16_t Block::*field) {
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<short>(blk[0].*field), static_cast<short>(blk[1].*field),
                                        static_cast<short>(blk[2].*field), static_cast<short>(blk[3].*field),
                                        static_cast<short>(blk[4].*field), static_cast<short>(blk[5].*field),
                                        static_cast<short>(blk[6].*field), static_cast<short>(blk[7].*field)));
}

// Blocks b..b+7 of a row against NT tokens, added to acc. Their integer sums
// are reduced to one vector (lane j: block b + j), the unsigned quants'
// offset taken back from it exactly (kOffset x the activation block's sum),
// and the eight blocks scaled at once by dw x dx: one convert and one fma
// where int8_block has eight of each and eight scalar products (and kMin's
// m x dsum one more fma): Q4_0 reads faster, Q8_0, nearer the memory's
// speed, is level.
template <class Row, int NT>
STREAMLLM_AVX2 inline void int8_blocks8(const typename Row::Block* blk, const QuantizedActivations::Slice& xa, std::size_t b,
                                        __m256 (&acc)[NT]) {
  using Block = typename Row::Block;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256 dw = halves8(blk, &Block::d);
  __m256 mw = _mm256_setzero_ps();
  if constexpr (Row::kMin) mw = halves8(blk, &Block::m);
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 32 * b;
    __m256i dots[8];
    for (int j = 0; j < 8; ++j) {
      const __m256i q = Row::quants(blk[j]);
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * j));
      if constexpr (Row::kSigned) x = _mm256_sign_epi8(x, q);
      dots[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(Row::kSigned ? _mm256_sign_epi8(q, q) : q, x), ones);
    }
    __m256i isum = reduce8(dots);
    if constexpr (Row::kOffset != 0)
      isum = _mm256_sub_epi32(isum, _mm256_mullo_epi32(_mm256_set1_epi32(Row::kOffset),
                                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.sum_row(tt) + b))));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_loadu_ps(xa.d_row(tt) + b)), acc[t]);
    if constexpr (Row::kMin) acc[t] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xa.dsum_row(tt) + b), acc[t]);
  }
}

// Rows [r0, r1) against NT tokens: eight blocks at a time, the rest one by one.
template <class Row, int NT>
STREAMLLM_AVX2 inline void gemv_int8_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                          const QuantizedActivations::Slice& xa, float* y, std::size_t ldy) {
  using Block = typename Row::Block;
  const std::size_t nb = xa.blocks;
  for (std::size_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const Block*>(w + r * row_bytes);
    __m256 acc[NT];
    float extra[NT] = {};
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    std::size_t b = 0;
    for (; b + 8 <= nb; b += 8) int8_blocks8<Row, NT>(row + b, xa, b, acc);
    for (; b < nb; ++b) int8_block<Row, NT>(row[b], xa, b, acc, extra);
    for (int t = 0; t < NT; ++t) y[static_cast<std::size_t>(t) * ldy + r] = hsum(acc[t]) + extra[t];
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
