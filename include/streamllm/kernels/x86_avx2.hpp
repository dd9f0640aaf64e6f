// AVX2 decode kernels, for x86 CPUs without AVX-512 (or whose hypervisor
// hides it): F16 / BF16 rows widened to f32, and Q8_0 / Q4_0 / Q4_K / Q5_K /
// Q6_K rows multiplied with int8 activations by vpmaddubsw. Compiled with a target attribute
// whatever the build flags and chosen at run time (cpu_features.hpp, Isa::Avx2),
// as the AVX-512 kernels are; the scalar twins are in gemv_typed.hpp.
//
// Without them a portable build read these types through the scalar loops
// (dequantise a row, then dot): on an AVX2-only Zen 4 guest, TinyLlama F16
// and Q8_0 decode ran at a fraction of the memory's speed.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STREAMLLM_HAVE_AVX2_KERNELS 1

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "streamllm/dtype.hpp"
#include "streamllm/kernels/activations_q8.hpp"
#include "streamllm/quant/blocks.hpp"

#define STREAMLLM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace streamllm::kernels::avx2 {

STREAMLLM_AVX2 inline float hsum(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// ---- Float rows: 8 elements widened to f32 per load -------------------------

struct F16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX2 static __m256 load(const std::byte* row, std::size_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  STREAMLLM_AVX2 static float scalar(const std::byte* row, std::size_t k) {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * k, 2);
    return _cvtsh_ss(h);
  }
};

struct BF16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX2 static __m256 load(const std::byte* row, std::size_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  STREAMLLM_AVX2 static float scalar(const std::byte* row, std::size_t k) {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * k, 2);
    const std::uint32_t bits = std::uint32_t(h) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

// `cols` elements of a row to f32 where a vector converter exists (F16,
// BF16, Q8_0: the f32 tiles' rows, exactly as the scalar loops round them);
// false for the others. The weights are converted once per prefill call,
// whatever its token count: through the scalar loops that was a sixth of a
// 16-token chat turn's prefill (TinyLlama Q8_0, 2 threads, Zen 3).
template <class Row>
STREAMLLM_AVX2 inline void widen_row(const std::byte* src, std::size_t cols, float* dst) {
  std::size_t i = 0;
  for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(dst + i, Row::load(src, i));
  for (; i < cols; ++i) dst[i] = Row::scalar(src, i);
}

STREAMLLM_AVX2 inline bool dequantize_row_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  switch (t) {
    case DType::F16: widen_row<F16Row>(src, cols, dst); return true;
    case DType::BF16: widen_row<BF16Row>(src, cols, dst); return true;
    case DType::Q8_0: {
      const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(src);
      for (std::size_t b = 0; b < cols / 32; ++b) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk[b].d));
        for (std::size_t j = 0; j < 32; j += 8) {
          const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk[b].qs + j));
          _mm256_storeu_ps(dst + 32 * b + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
      }
      return true;
    }
    default: return false;
  }
}

// Rows rows[0..R) against NT tokens: R x NT accumulators, two chains per row
// for one token so that the FMA latency is covered; with R = 2 and up to 4
// tokens, 16 ymm registers hold them, the tokens' activations of a step and
// one weight vector.
template <class Row, int NT, std::size_t R>
STREAMLLM_AVX2 inline void gemv_widen_block(const std::size_t (&rows)[R], const std::byte* w, std::size_t row_bytes,
                                            std::size_t k, const float* x, std::size_t ldx, float* y, std::size_t ldy) {
  constexpr int C = NT == 1 ? 2 : 1;
  const std::size_t kend = k / 16 * 16;
  __m256 acc[R][NT][C];
  const std::byte* row[R];
  for (std::size_t i = 0; i < R; ++i) {
    row[i] = w + rows[i] * row_bytes;
    for (int t = 0; t < NT; ++t)
      for (int c = 0; c < C; ++c) acc[i][t][c] = _mm256_setzero_ps();
  }
  for (std::size_t kk = 0; kk < kend; kk += 16) {
    for (std::size_t v = 0; v < 2; ++v) {
      __m256 xv[NT];
      for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + static_cast<std::size_t>(t) * ldx + kk + 8 * v);
      for (std::size_t i = 0; i < R; ++i) {
        const __m256 wv = Row::load(row[i], kk + 8 * v);
        for (int t = 0; t < NT; ++t) acc[i][t][v % C] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][v % C]);
      }
    }
  }
  for (std::size_t i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      __m256 s = acc[i][t][0];
      for (int c = 1; c < C; ++c) s = _mm256_add_ps(s, acc[i][t][c]);
      float sum = hsum(s);
      for (std::size_t kk = kend; kk < k; ++kk) sum += Row::scalar(row[i], kk) * x[static_cast<std::size_t>(t) * ldx + kk];
      y[static_cast<std::size_t>(t) * ldy + rows[i]] = sum;
    }
}

// Rows [r0, r1) against NT tokens, two at a time, one from each half of the
// range: two long sequential streams, which the hardware prefetcher follows.
// TinyLlama F16 / BF16 decode, one thread, AMD EPYC (Zen 4) guest: 4
// consecutive rows at a time (4 streams of one 4 KiB page each) 6.9 / 6.2
// tok/s; from the quarters 10.7-11.8 / 10.1-11.5; from the halves 11.4-11.5 /
// 11.2-11.8; one stream 9.3 / 9.1; a software prefetch 1 KiB ahead 9.9-10.3
// / 9.3-10.4.
template <class Row, int NT>
STREAMLLM_AVX2 inline void gemv_widen_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                           std::size_t k, const float* x, std::size_t ldx, float* y, std::size_t ldy) {
  constexpr std::size_t R = 2;
  const std::size_t q = (r1 - r0) / R;
  for (std::size_t i = 0; i < q; ++i) {
    std::size_t rows[R];
    for (std::size_t s = 0; s < R; ++s) rows[s] = r0 + s * q + i;
    gemv_widen_block<Row, NT, R>(rows, w, row_bytes, k, x, ldx, y, ldy);
  }
  for (std::size_t r = r0 + R * q; r < r1; ++r) {
    const std::size_t one[1] = {r};
    gemv_widen_block<Row, NT, 1>(one, w, row_bytes, k, x, ldx, y, ldy);
  }
}

// Lane j: the sum of the eight lanes of v[j].
STREAMLLM_AVX2 inline __m256i reduce8(const __m256i (&v)[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // a: 128-bit lane 0 holds the low halves' sums of v0..v3, lane 1 the high halves'.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// ---- Q8_0 / Q4_0 rows x int8 activations (vpmaddubsw) -----------------------
//
// vpmaddubsw multiplies unsigned by signed bytes: Q8_0's magnitudes |w| go in
// as the unsigned operand and the activations take the weights' signs
// (vpsignb), so each product is |w| x sign(w) x = w x. A pair of products
// stays within int16 (|w| <= 128, |x| <= 127), vpmaddwd by ones adds pairs
// into int32 lanes, and each block is scaled once: dw dx. One row at a time:
// the rows are one sequential stream, which the hardware prefetcher
// follows: a software prefetch of every block made decode slower.

// A Row gives a block's 32 quants in element order; kSigned: signed
// quants (the sign trick above), otherwise unsigned with kOffset taken back
// as kOffset x the activation block's sum, and kMin: an offset m per block
// (Q4_1, Q5_1: x = d q + m), m x the activation block's d x sum.
struct Q8_0Row {
  using Block = quant::BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};

// Element j in the low nibble of byte j, element j + 16 in the high one:
// the 16 bytes in both halves, the upper half's 64-bit lanes shifted right
// by 4, then every byte masked to its low nibble (the bits a shift carries
// in from the next byte are masked off). Three instructions, not five.
STREAMLLM_AVX2 inline __m256i nibbles(const std::uint8_t* qs) {
  const __m256i p = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(p, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

// 16 in byte j where bit j of a Q5 block's qh is set: byte j gets byte j / 8
// of qh, or'd with every bit but j % 8; all ones means the bit was set.
STREAMLLM_AVX2 inline __m256i fifth_bits16(const std::uint8_t* qh4) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, qh4, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Q4_0's nibbles go in unsigned (0..15, the quant + 8) with the activations
// as they are, and 8 x the activation block's sum is taken back: two vpsignb
// and a subtraction fewer per block. Q5_0 likewise with its
// fifth bits (0..31, the quant + 16).
struct Q4_0Row {
  using Block = quant::BlockQ4_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 8;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return nibbles(b.qs); }
};
struct Q5_0Row {
  using Block = quant::BlockQ5_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 16;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits16(b.qh)); }
};
struct Q4_1Row {
  using Block = quant::BlockQ4_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return nibbles(b.qs); }
};
struct Q5_1Row {
  using Block = quant::BlockQ5_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits16(b.qh)); }
};

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

// ---- Q4_K / Q5_K / Q6_K rows x int8 activations -----------------------------
//
// Per vector of 32 quants (one activation block): vpmaddubsw with the
// activations, then vpmaddwd by the sub-block scales (int16) instead of by
// ones, so the integer sums come out scaled. A super-block's eight vectors
// are reduced together, lane j to the sum of vector j (reduce8), so that the
// float work - convert, times d x the eight activation scales, add - is one
// vector per super-block and token instead of one per block. Q4_K's nibbles
// are unsigned (0..15; Q5_K's quants 0..31 likewise); its mins, dmin m dx x
// the activation block's sum, are one more vector. Q6_K's quants minus 32
// take vpmaddubsw's sign trick, as Q8_0 does; a vector spans two sub-blocks
// of 16, whose scales fill its halves.
// Scaling per block instead, and unpacking the scales one by one, were both
// slower.

// A Q4_K super-block's nibbles as bytes 0..15, q[j] = elements 32j..32j+31.
STREAMLLM_AVX2 inline void q4k_quants(const std::uint8_t* qs, __m256i (&q)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    q[2 * c] = _mm256_and_si256(v, m4);
    q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

// A Q5_K super-block's quants as bytes 0..31: Q4_K's nibbles, and bit j of
// qh[l] moved to bit 4 of element 32j + l.
STREAMLLM_AVX2 inline void q5k_quants(const quant::BlockQ5K& b, __m256i (&q)[8]) {
  q4k_quants(b.qs, q);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)), bit4 = _mm256_set1_epi8(0x10);
  for (int j = 0; j < 8; ++j) {
    // 16-bit shifts: bit 4 of each byte comes from the same byte (shifts of at most 4)
    const __m256i at4 = j < 4 ? _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - j)) : _mm256_srl_epi16(h, _mm_cvtsi32_si128(j - 4));
    q[j] = _mm256_or_si256(q[j], _mm256_and_si256(at4, bit4));
  }
}

// A Q6_K super-block's quants as bytes 0..63 (before the -32), q[j] =
// elements 32j..32j+31: q[4h + c] holds 128h + 32c + i (the layout
// gemv_kquant_int8 spells out).
STREAMLLM_AVX2 inline void q6k_quants(const quant::BlockQ6K& b, __m256i (&q)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
    q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), m30));
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hi, 2), m30));
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hi, m30));
    q[4 * h + 3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hi, 2), m30));
  }
}

STREAMLLM_AVX2 inline __m256i kquant_dot(__m256i q_abs, __m256i q_signs, const std::int8_t* xq, __m256i scales16, bool signed_q) {
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if (signed_q) x = _mm256_sign_epi8(x, q_signs);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q_abs, x), scales16);
}

// Super-block sb of a Q4_K or Q5_K row against NT tokens.
template <int NT, class Block>
STREAMLLM_AVX2 inline void q4k_super_block(const Block& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d)), dmin = _mm256_set1_ps(_cvtsh_ss(b.dmin));
  __m256i q[8], scales16[8];
  if constexpr (std::is_same_v<Block, quant::BlockQ4K>)
    q4k_quants(b.qs, q);
  else
    q5k_quants(b, q);
  // The eight scales as int16 in each half, sub-block j's spread over a
  // vector by one byte shuffle; mins widened to float.
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
  const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(p.scales))));
  for (int j = 0; j < 8; ++j) scales16[j] = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<short>(0x0202 * j + 0x0100)));
  const __m256 dmin_m =
      _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(p.mins)))));
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 256 * sb;
    __m256i dots[8];
    for (int j = 0; j < 8; ++j) dots[j] = kquant_dot(q[j], q[j], xq + 32 * j, scales16[j], false);
    const __m256 dx = _mm256_loadu_ps(xa.d_row(tt) + 8 * sb);
    const __m256 sums = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.sum_row(tt) + 8 * sb)));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(dots)), _mm256_mul_ps(d, dx), acc[t]);
    acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin_m, dx), sums, acc[t]);
  }
}

// Super-block sb of a Q6_K row against NT tokens.
template <int NT>
STREAMLLM_AVX2 inline void q6k_super_block(const quant::BlockQ6K& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                           __m256 (&acc)[NT]) {
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
  const __m256i off = _mm256_set1_epi8(32);
  __m256i q[8], scales16[8];
  q6k_quants(b, q);
  // The sixteen scales as int16, the first eight in both halves of `lo`, the
  // last eight in both of `hi`: block j's two sub-blocks of 16 (scales 2j and
  // 2j + 1) fill its vector's halves by one byte shuffle.
  const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  const __m256i lo = _mm256_permute2x128_si256(s16, s16, 0x00), hi = _mm256_permute2x128_si256(s16, s16, 0x11);
  __m256i q_abs[8];
  for (int j = 0; j < 8; ++j) {
    q[j] = _mm256_sub_epi8(q[j], off);  // -32..31
    q_abs[j] = _mm256_sign_epi8(q[j], q[j]);
    const int k = 2 * (j % 4);  // int16 lanes k and k + 1 of lo or hi
    const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x0202 * (k + 1) + 0x0100)),
                                          _mm_set1_epi16(static_cast<short>(0x0202 * k + 0x0100)));
    scales16[j] = _mm256_shuffle_epi8(j < 4 ? lo : hi, pick);
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 256 * sb;
    __m256i dots[8];
    for (int j = 0; j < 8; ++j) dots[j] = kquant_dot(q_abs[j], q[j], xq + 32 * j, scales16[j], true);
    const __m256 dx = _mm256_loadu_ps(xa.d_row(tt) + 8 * sb);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(dots)), _mm256_mul_ps(d, dx), acc[t]);
  }
}

// Rows [r0, r1) of a Q4_K, Q5_K or Q6_K matrix against NT tokens.
template <int NT>
STREAMLLM_AVX2 inline void gemv_kquant_rows(DType type, std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                            const QuantizedActivations::Slice& xa, float* y, std::size_t ldy) {
  const std::size_t super_blocks = xa.cols() / 256;
  for (std::size_t r = r0; r < r1; ++r) {
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    const std::byte* row = w + r * row_bytes;
    for (std::size_t sb = 0; sb < super_blocks; ++sb) {
      if (type == DType::Q4_K)
        q4k_super_block<NT>(reinterpret_cast<const quant::BlockQ4K*>(row)[sb], xa, sb, acc);
      else if (type == DType::Q5_K)
        q4k_super_block<NT>(reinterpret_cast<const quant::BlockQ5K*>(row)[sb], xa, sb, acc);
      else
        q6k_super_block<NT>(reinterpret_cast<const quant::BlockQ6K*>(row)[sb], xa, sb, acc);
    }
    for (int t = 0; t < NT; ++t) y[static_cast<std::size_t>(t) * ldy + r] = hsum(acc[t]);
  }
}

}  // namespace streamllm::kernels::avx2

#endif
