// Int8 tiled matrix-matrix product (prefill) for Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K, IQ4_NL and IQ4_XS weights, with AVX512-VNNI: vpdpbusd multiplies 64 byte pairs per
// instruction, twice the work of a bf16 dot, so quantised prefill runs on the
// integer units instead of dequantising to bf16 or f32.
//
// Same layout as the f32 and bf16 tiles (gemm.hpp, float_tiles.hpp): tokens along the lanes,
// weight rows along registers. Per block of 32 (or 16) weights the kernel sums
// integer products exactly, then scales once: acc += float(isum) * dw[row] * dx[token].
//   activations: quantised per token and block like the decode path (int8,
//     scale max|x| / 127), stored as unsigned q + 128, so the weights can be
//     the signed operand and be broadcast straight from memory;
//   weights: a block of rows unpacked once into signed int8 (Q4_0 nibbles
//     minus 8, Q5_0 quants minus 16, Q4_1 / Q5_1 / Q4_K / Q5_K / Q2_K
//     quants, Q6_K quants minus 32, Q3_K minus 4, IQ4's levels) with their
//     scales and -128 x each block's sum of quants, which starts each
//     integer sum and cancels the +128 of the activations.
// The K-quants keep their own scales, so the products are exact in the
// weights: Q6_K's sub-blocks of 16 take a scale per half block (Int8Format's
// split), and Q4_K's (and Q5_K's) affine offset (-dmin m per sub-block of 32) multiplies
// the activation block's sum, d x sum of its quants, packed beside its scales;
// so does Q4_1's and Q5_1's m, and Q2_K's -dmin m per sub-block of 16 the
// sums of the block's halves (the first half's packed too, the second's the
// difference).
#pragma once

#include "streamllm/kernels/matmul/avx512/int8_blocks.hpp"
#include "streamllm/kernels/matmul/avx512/isa.hpp"
#include "streamllm/kernels/matmul/avx512/kquants.hpp"
#include "streamllm/kernels/matmul/avx512/low_bit_kquants.hpp"
#include "streamllm/kernels/matmul/avx512/nonlinear_blocks.hpp"
#include "streamllm/kernels/matmul/avx512/unsigned_blocks.hpp"
#include "streamllm/kernels/matmul/int8_tile_format.hpp"
#include "streamllm/kernels/matmul/prefetch_rows.hpp"
#include "streamllm/kernels/matmul/x86_rows.hpp"
#include "streamllm/kernels/simd/avx512_warnings.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "streamllm/core/error.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/quant/blocks.hpp"

STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Packed activations of one group of 32 tokens, per 32-block of k: eight
// quads of 32 tokens x 4 unsigned bytes (1024 B), the 32 scales d, the 32
// products d x (sum of the block's quants), which Q4_K's mins multiply, and
// d x (sum of its first 16 quants), for Q2_K's mins per 16.
inline constexpr std::size_t kInt8Tok = 32;
inline constexpr std::size_t kInt8QuadBytes = 8 * kInt8Tok * 4;
inline constexpr std::size_t kInt8ScalesAt = kInt8QuadBytes, kInt8SumsAt = kInt8ScalesAt + kInt8Tok * sizeof(float),
                             kInt8HalfSumsAt = kInt8SumsAt + kInt8Tok * sizeof(float);
inline constexpr std::size_t kInt8BlockBytes = kInt8HalfSumsAt + kInt8Tok * sizeof(float);

// The weight rows' layout: Int8Format (int8_tile_format.hpp).

STREAMLLM_AVX512 inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Four rows of 16 tokens (r[i]: row i, token j in lane j) to y token-major:
// y[t][0..rows) for t < ntok. Pairs of rows interleave, then pairs of pairs,
// which leaves token 4L + c's four rows in 128-bit lane L of v[c].
STREAMLLM_AVX512 inline void store_token_major4(const __m512 (&r)[4], std::size_t rows, float* y, std::size_t ldy,
                                                std::size_t ntok) {
  const __m512 lo01 = _mm512_unpacklo_ps(r[0], r[1]), hi01 = _mm512_unpackhi_ps(r[0], r[1]);
  const __m512 lo23 = _mm512_unpacklo_ps(r[2], r[3]), hi23 = _mm512_unpackhi_ps(r[2], r[3]);
  const __m512 v[4] = {
      _mm512_shuffle_ps(lo01, lo23, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(lo01, lo23, _MM_SHUFFLE(3, 2, 3, 2)),
      _mm512_shuffle_ps(hi01, hi23, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(hi01, hi23, _MM_SHUFFLE(3, 2, 3, 2))};
  const auto mask = static_cast<__mmask8>((1u << rows) - 1);
  for (std::size_t col = 0; col < 4; ++col) {
    const __m128 lanes[4] = {_mm512_castps512_ps128(v[col]), _mm512_extractf32x4_ps(v[col], 1), _mm512_extractf32x4_ps(v[col], 2),
                             _mm512_extractf32x4_ps(v[col], 3)};
    for (std::size_t lane = 0; lane < 4 && 4 * lane + col < ntok; ++lane)
      _mm_mask_storeu_ps(y + (4 * lane + col) * ldy, mask, lanes[lane]);
  }
}

// MR rows x 32 tokens. Partial sums go to c (rows x tokens); with y, the last
// slice of k goes to y token-major instead (y[t][0..MR) for t < ntok), in
// registers: a separate transpose of the sums, through memory, cost more.
// One function: its 2 x MR accumulators and the block's loads must be one
// register allocation (a micro-kernel split into calls spills them). Each block of k asks for a line of each row's next slice
// (prefetch_rows.hpp), so the driver's next read of these rows is on its way.
template <class Format, std::size_t MR>
STREAMLLM_AVX512 inline void gemm_int8_micro(const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc,
                                             float* c, std::size_t ldc, bool accumulate, float* y, std::size_t ldy,
                                             std::size_t ntok, const NextSlice& next) {
  constexpr std::size_t kSplit = Format::kSplit, kQuads = 8 / kSplit;
  const std::size_t nb = kc / 32;
  const std::byte* scales = w + Format::scales_at(kc);
  const std::byte* corrections = w + Format::corrections_at(kc);
  __m512 acc0[MR], acc1[MR];
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (std::size_t b = 0; b < nb; ++b) {
    prefetch_line_of_rows(next, MR, b);  // the rows' next slice, a line a block
    const std::uint8_t* xb = xp + b * kInt8BlockBytes;
    const __m512 dx0 = _mm512_load_ps(reinterpret_cast<const float*>(xb + kInt8ScalesAt));
    const __m512 dx1 = _mm512_load_ps(reinterpret_cast<const float*>(xb + kInt8ScalesAt + 64));
    for (std::size_t h = 0; h < kSplit; ++h) {
      const std::size_t s = Format::scale_index(b, h);
      // Two integer chains per accumulator where a scale covers eight quads
      // (even quads and odd): one chain of eight vpdpbusd waits on its own
      // latency. Four quads (Q6_K's halves) are short enough for one chain:
      // two chains of two were slower.
      constexpr std::size_t kChains = kQuads >= 8 ? 2 : 1;
      __m512i s0[kChains][MR], s1[kChains][MR];
      for (std::size_t i = 0; i < MR; ++i) {
        std::int32_t corr;
        std::memcpy(&corr, corrections + i * ldw + 4 * s, 4);
        for (std::size_t ch = 0; ch < kChains; ++ch)
          s0[ch][i] = s1[ch][i] = ch == 0 ? _mm512_set1_epi32(corr) : _mm512_setzero_si512();
      }
      for (std::size_t j = h * kQuads; j < (h + 1) * kQuads; j += kChains)
        for (std::size_t ch = 0; ch < kChains; ++ch) {
          const std::uint8_t* xq = xb + (j + ch) * 128;
          const __m512i x0 = _mm512_load_si512(xq), x1 = _mm512_load_si512(xq + 64);
          for (std::size_t i = 0; i < MR; ++i) {
            std::int32_t quad;
            std::memcpy(&quad, w + i * ldw + Format::quad_at(b, j + ch), 4);
            const __m512i wb = _mm512_set1_epi32(quad);
            s0[ch][i] = _mm512_dpbusd_epi32(s0[ch][i], x0, wb);
            s1[ch][i] = _mm512_dpbusd_epi32(s1[ch][i], x1, wb);
          }
        }
      for (std::size_t i = 0; i < MR; ++i) {
        __m512i sum0 = s0[0][i], sum1 = s1[0][i];
        if constexpr (kChains == 2) {
          sum0 = _mm512_add_epi32(sum0, s0[1][i]);
          sum1 = _mm512_add_epi32(sum1, s1[1][i]);
        }
        const __m512 dw = _mm512_set1_ps(load_f32(scales + i * ldw + 4 * s));
        acc0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum0), _mm512_mul_ps(dw, dx0), acc0[i]);
        acc1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum1), _mm512_mul_ps(dw, dx1), acc1[i]);
      }
    }
    if constexpr (Format::kMins) {
      // Each part's min times the tokens' d x sum over that part: the whole
      // block's sum, or (Split 2) the first half's and the rest.
      const std::byte* mins = w + Format::mins_at(kc);
      const auto* sums = reinterpret_cast<const float*>(xb + kInt8SumsAt);
      const auto* half_sums = reinterpret_cast<const float*>(xb + kInt8HalfSumsAt);
      __m512 sx0[kSplit], sx1[kSplit];
      sx0[0] = _mm512_load_ps(sums);
      sx1[0] = _mm512_load_ps(sums + 16);
      if constexpr (kSplit == 2) {
        sx0[1] = _mm512_sub_ps(sx0[0], _mm512_load_ps(half_sums));
        sx1[1] = _mm512_sub_ps(sx1[0], _mm512_load_ps(half_sums + 16));
        sx0[0] = _mm512_load_ps(half_sums);
        sx1[0] = _mm512_load_ps(half_sums + 16);
      }
      for (std::size_t h = 0; h < kSplit; ++h)
        for (std::size_t i = 0; i < MR; ++i) {
          const __m512 mw = _mm512_set1_ps(load_f32(mins + i * ldw + 4 * Format::scale_index(b, h)));
          acc0[i] = _mm512_fmadd_ps(mw, sx0[h], acc0[i]);
          acc1[i] = _mm512_fmadd_ps(mw, sx1[h], acc1[i]);
        }
    }
  }
  if (y) {
    static_assert(MR <= 4);
    __m512 r0[4], r1[4];
    for (std::size_t i = 0; i < 4; ++i) {
      r0[i] = i < MR ? acc0[i] : _mm512_setzero_ps();
      r1[i] = i < MR ? acc1[i] : _mm512_setzero_ps();
    }
    store_token_major4(r0, MR, y, ldy, ntok);
    if (ntok > 16) store_token_major4(r1, MR, y + 16 * ldy, ldy, ntok - 16);
    return;
  }
  for (std::size_t i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

template <class Format, std::size_t... MR>
STREAMLLM_AVX512 inline void gemm_int8_micro_rows(std::size_t rows, const std::byte* w, std::size_t ldw, const std::uint8_t* xp,
                                                  std::size_t kc, float* c, std::size_t ldc, bool accumulate,
                                                  const TokenMajorOut& out, std::index_sequence<MR...>) {
  ((rows == MR + 1 ? gemm_int8_micro<Format, MR + 1>(w, ldw, xp, kc, c, ldc, accumulate, out.y, out.ldy, out.tokens, out.next)
                   : void()),
   ...);
}

// Group g of x [n][ldx] (k a multiple of 32) -> its packed blocks; padding
// tokens get quants 0 and scale 0. Each token's quantised block goes straight
// to its place in the eight quads (one 8-lane scatter), +128 to make it
// unsigned: no token-major copy to transpose afterwards.
STREAMLLM_AVX512 inline void pack_group_int8(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp,
                                             std::size_t g) {
  const std::size_t nb = k / 32, valid = std::min(kInt8Tok, n - g * kInt8Tok);
  std::uint8_t* dst = xp + g * nb * kInt8BlockBytes;
  const __m256i quad_index = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);  // in int32s: quad j at 128 B x j
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  alignas(32) std::int8_t q[32];
  for (std::size_t b = 0; b < nb; ++b) {
    std::uint8_t* blk = dst + b * kInt8BlockBytes;
    for (std::size_t t = 0; t < kInt8Tok; ++t) {
      float d = 0, dsum = 0, dhalf = 0;
      if (t < valid) {
        const auto [scale, sum] = quantize_block_avx512(x + (g * kInt8Tok + t) * ldx + 32 * b, q);
        d = scale;
        dsum = scale * static_cast<float>(sum);
        dhalf = scale * static_cast<float>(sum_i8x16(_mm_load_si128(reinterpret_cast<const __m128i*>(q))));
      } else {
        std::memset(q, 0, 32);
      }
      const __m256i v = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(q)), offset);
      _mm256_i32scatter_epi32(blk + 4 * t, quad_index, v, 4);
      std::memcpy(blk + kInt8ScalesAt + 4 * t, &d, 4);
      std::memcpy(blk + kInt8SumsAt + 4 * t, &dsum, 4);
      std::memcpy(blk + kInt8HalfSumsAt + 4 * t, &dhalf, 4);
    }
  }
}

// Sum of 32 signed bytes: vpsadbw sums unsigned bytes in groups of 8, so
// flip the sign bits (+128 each) and take 32 x 128 back.
STREAMLLM_AVX512 inline std::int32_t sum_i8x32(__m256i v) {
  const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))), _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<std::int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

// Sums of v's unsigned bytes in runs of 16: four per vector.
STREAMLLM_AVX512 inline void byte_sums16(__m512i v, std::int32_t out[4]) {
  alignas(64) std::uint64_t s[8];
  _mm512_store_si512(s, _mm512_sad_epu8(v, _mm512_setzero_si512()));
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<std::int32_t>(s[2 * i] + s[2 * i + 1]);
}

// One Q4_K or Q5_K super-block as Int8Q4K lays it out: the quants as they
// are (signed bytes 0..15 or 0..31), d sc and -dmin m per sub-block of 32,
// and the corrections. q: 256 bytes; scales, corrections, mins: 8 each.
template <class Block>
STREAMLLM_AVX512 inline void unpack_q4k(const Block& blk, std::int8_t* q, std::byte* scales, std::byte* corrections,
                                        std::byte* mins) {
  __m512 sc;
  __m256 mn;
  q4k_scales_mins(blk, sc, mn);
  _mm256_storeu_ps(reinterpret_cast<float*>(scales), _mm512_castps512_ps256(sc));
  _mm256_storeu_ps(reinterpret_cast<float*>(mins), _mm256_sub_ps(_mm256_setzero_ps(), mn));
  __m512i v[4];
  if constexpr (std::is_same_v<Block, quant::BlockQ4K>)
    q4k_quants(blk.qs, v);
  else
    q5k_quants(blk, v);
  for (std::size_t i = 0; i < 4; ++i) {
    _mm512_storeu_si512(q + 64 * i, v[i]);
    std::int32_t s16[4];
    byte_sums16(v[i], s16);
    for (std::size_t h = 0; h < 2; ++h) {
      const std::int32_t corr = -128 * (s16[2 * h] + s16[2 * h + 1]);
      std::memcpy(corrections + 4 * (2 * i + h), &corr, 4);
    }
  }
}

// A super-block of sub-blocks of 16 (Q6_K, Q3_K, Q2_K: a Format of
// super_blocks.hpp) as Int8Q6K (Int8Q2K) lays it out: the quants less their
// offset (signed bytes), the scales and the corrections per sub-block (16
// each), and for Q2_K its -dmin m per sub-block.
template <class Format>
STREAMLLM_AVX512 inline void unpack_sub_blocks16(const typename Format::Block& blk, std::int8_t* q, std::byte* scales,
                                                 std::byte* corrections, std::byte* mins = nullptr) {
  static_assert(Format::kSubBlock == 16);
  _mm512_storeu_ps(reinterpret_cast<float*>(scales), Format::scales(blk));
  if constexpr (Format::kMins)
    _mm512_storeu_ps(reinterpret_cast<float*>(mins), _mm512_sub_ps(_mm512_setzero_ps(), Format::mins(blk)));
  __m512i v[4];
  Format::quants(blk, v);
  for (std::size_t i = 0; i < 4; ++i) {
    _mm512_storeu_si512(q + 64 * i, _mm512_sub_epi8(v[i], _mm512_set1_epi8(Format::kOffset)));
    std::int32_t s16[4];
    byte_sums16(v[i], s16);
    for (std::size_t h = 0; h < 4; ++h) {
      const std::int32_t corr = -128 * (s16[h] - 16 * Format::kOffset);
      std::memcpy(corrections + 4 * (4 * i + h), &corr, 4);
    }
  }
}

// A super-block of blocks of 32 (IQ4_XS) as Int8Blocks lays it out: signed
// quants, each block's scale and -128 x its sum.
template <class Format>
STREAMLLM_AVX512 inline void unpack_super_block32(const typename Format::Block& blk, std::int8_t* q, std::byte* scales,
                                                  std::byte* corrections) {
  static_assert(Format::kSubBlock == 32 && !Format::kMins);
  alignas(64) float d[16];
  _mm512_store_ps(d, Format::scales(blk));
  __m512i v[4];
  Format::quants(blk, v);
  for (std::size_t i = 0; i < 4; ++i) {
    const __m512i s = _mm512_sub_epi8(v[i], _mm512_set1_epi8(static_cast<char>(Format::kOffset)));
    _mm512_storeu_si512(q + 64 * i, s);
    for (std::size_t h = 0; h < 2; ++h) {
      const std::size_t b = 2 * i + h;
      const std::int32_t corr = -128 * sum_i8x32(h ? _mm512_extracti64x4_epi64(s, 1) : _mm512_castsi512_si256(s));
      std::memcpy(scales + 4 * b, &d[b], 4);
      std::memcpy(corrections + 4 * b, &corr, 4);
    }
  }
}

// Blocks [0, nb) of a row of Q4_1, Q5_0 or Q5_1 as Int8Blocks (Q5_0: the
// quants minus 16) or Int8Q4K (Q4_1, Q5_1: the quants as they are, and m per
// block) lays them out. Row: the AVX2 decode kernels' policy of the type
// (x86_rows.hpp), whose 32 quants per block are the same here.
template <class Row>
STREAMLLM_AVX512 inline void unpack_unsigned_blocks(const std::byte* src, std::size_t nb, std::int8_t* q, std::byte* scales,
                                                    std::byte* corrections, std::byte* mins) {
  const auto* blk = reinterpret_cast<const typename Row::Block*>(src);
  for (std::size_t b = 0; b < nb; ++b) {
    const __m256i v = _mm256_sub_epi8(Row::quants(blk[b]), _mm256_set1_epi8(static_cast<char>(Row::kOffset)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), v);
    const float d = _cvtsh_ss(blk[b].d);
    const std::int32_t corr = -128 * sum_i8x32(v);
    std::memcpy(scales + 4 * b, &d, 4);
    std::memcpy(corrections + 4 * b, &corr, 4);
    if constexpr (Row::kMin) {
      const float m = _cvtsh_ss(blk[b].m);
      std::memcpy(mins + 4 * b, &m, 4);
    }
  }
}

// Blocks [0, nb) of a Q8_0, Q4_0 or IQ4_NL row (or the blocks past an
// interleaved row's last group) as Int8Blocks: signed quants, each block's
// scale and -128 x its sum.
STREAMLLM_AVX512 inline void unpack_blocks32(DType type, const std::byte* src, std::size_t nb, std::int8_t* q, std::byte* scales,
                                             std::byte* corrections) {
  for (std::size_t b = 0; b < nb; ++b) {
    std::uint16_t dh;
    __m256i v;
    if (type == DType::Q8_0) {
      const auto& blk = reinterpret_cast<const quant::BlockQ8_0*>(src)[b];
      dh = blk.d;
      v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
    } else {  // Q4_0 and IQ4_NL: 16 bytes of nibbles, quants q - 8 or levels[q]
      const auto& blk = reinterpret_cast<const quant::BlockQ4_0*>(src)[b];
      dh = blk.d;
      const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)), m = _mm_set1_epi8(0x0F);
      const __m128i lo = _mm_and_si128(p, m), hi = _mm_and_si128(_mm_srli_epi16(p, 4), m);
      const __m256i nibbles = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
      v = type == DType::IQ4_NL
              ? _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Levels))), nibbles)
              : _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), v);
    const float d = _cvtsh_ss(dh);
    const std::int32_t corr = -128 * sum_i8x32(v);
    std::memcpy(scales + 4 * b, &d, 4);
    std::memcpy(corrections + 4 * b, &corr, 4);
  }
}

// unpack(block s, s) for each super-block of `kc` columns of a row.
template <class Block, class Unpack>
STREAMLLM_AVX512 inline void unpack_each(const std::byte* src, std::size_t kc, Unpack unpack) {
  const auto* blk = reinterpret_cast<const Block*>(src);
  for (std::size_t s = 0; s < kc / 256; ++s) unpack(blk[s], s);
}

// The super-blocks of `kc` columns of a super-block row: Q4_K and Q5_K as
// Int8Q4K, Q6_K and Q3_K as Int8Q6K, Q2_K as Int8Q2K, IQ4_XS as Int8Blocks. The type is
// chosen once per row, not per super-block: a choice inside the loop was
// measurably slower.
STREAMLLM_AVX512 inline void unpack_kquants(DType type, const std::byte* src, std::size_t kc, std::int8_t* q, std::byte* scales,
                                            std::byte* corrections, std::byte* mins) {
  const auto affine = [&](const auto& b, std::size_t s) {
    unpack_q4k(b, q + 256 * s, scales + 32 * s, corrections + 32 * s, mins + 32 * s);
  };
  switch (type) {
    case DType::Q4_K: return unpack_each<quant::BlockQ4K>(src, kc, affine);
    case DType::Q5_K: return unpack_each<quant::BlockQ5K>(src, kc, affine);
    case DType::Q6_K:
      return unpack_each<quant::BlockQ6K>(src, kc, [&](const quant::BlockQ6K& b, std::size_t s) {
        unpack_sub_blocks16<Q6KFormat>(b, q + 256 * s, scales + 64 * s, corrections + 64 * s);
      });
    case DType::Q3_K:
      return unpack_each<quant::BlockQ3K>(src, kc, [&](const quant::BlockQ3K& b, std::size_t s) {
        unpack_sub_blocks16<Q3KFormat>(b, q + 256 * s, scales + 64 * s, corrections + 64 * s);
      });
    case DType::Q2_K:
      return unpack_each<quant::BlockQ2K>(src, kc, [&](const quant::BlockQ2K& b, std::size_t s) {
        unpack_sub_blocks16<Q2KFormat>(b, q + 256 * s, scales + 64 * s, corrections + 64 * s, mins + 64 * s);
      });
    default:  // IQ4_XS
      return unpack_each<quant::BlockIQ4XS>(src, kc, [&](const quant::BlockIQ4XS& b, std::size_t s) {
        unpack_super_block32<IQ4XSFormat>(b, q + 256 * s, scales + 32 * s, corrections + 32 * s);
      });
  }
}

// Rows of quantised weights unpacked a block at a time into Format's layout
// (the int8 tiles): Q8_0, Q4_0, Q5_0, IQ4_NL and IQ4_XS as Int8Blocks (the
// interleaved rows have tiles of their own: group_tiles.hpp), Q4_1, Q5_1,
// Q4_K and Q5_K as Int8Q4K, Q6_K and Q3_K as Int8Q6K, Q2_K as Int8Q2K.
template <class Format>
struct Int8Rows {
  const TensorView* w;

  // Whether columns [k0, k0 + kc) of these rows unpack into Format: the
  // type's format (not an interleaved one), whole super-blocks for the K-quants.
  void check_slice(std::size_t k0, std::size_t kc) const {
    const DType type = w->type;
    const bool affine = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q4_1 || type == DType::Q5_1;
    const bool fits = affine                                       ? std::is_same_v<Format, Int8Q4K>
                      : type == DType::Q6_K || type == DType::Q3_K ? std::is_same_v<Format, Int8Q6K>
                      : type == DType::Q2_K                        ? std::is_same_v<Format, Int8Q2K>
                      : quant::is_interleaved(type)                ? false
                                                                   : std::is_same_v<Format, Int8Blocks>;
    const bool super_blocks = traits(type).block_elems == 256;
    if (!fits || (super_blocks && (k0 % 256 != 0 || kc % 256 != 0)))
      throw Error("Int8Rows: " + std::string(dtype_name(w->type)) + " rows at columns [" + std::to_string(k0) + ", " +
                  std::to_string(k0 + kc) + ") do not fit this tile format");
  }

  STREAMLLM_AVX512 std::pair<const std::byte*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0,
                                                                  std::size_t kc, AlignedVector<std::byte>& scratch) const {
    check_slice(k0, kc);
    const std::size_t ld = Format::row_bytes(kc), nb = kc / 32;
    const DType type = w->type;  // not interleaved: check_slice
    std::byte* out = grow(scratch, rows * ld);
    for (std::size_t i = 0; i < rows; ++i) {
      std::byte* o = out + i * ld;
      auto* q = reinterpret_cast<std::int8_t*>(o);
      std::byte* scales = o + Format::scales_at(kc);
      std::byte* corrections = o + Format::corrections_at(kc);
      std::byte* mins = o + Format::mins_at(kc);
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(type, static_cast<std::int64_t>(k0));
      switch (type) {
        case DType::Q5_0: unpack_unsigned_blocks<x86::Q5_0Row>(src, nb, q, scales, corrections, mins); break;
        case DType::Q4_1: unpack_unsigned_blocks<x86::Q4_1Row>(src, nb, q, scales, corrections, mins); break;
        case DType::Q5_1: unpack_unsigned_blocks<x86::Q5_1Row>(src, nb, q, scales, corrections, mins); break;
        case DType::Q4_K:
        case DType::Q5_K:
        case DType::Q6_K:
        case DType::Q3_K:
        case DType::Q2_K:
        case DType::IQ4_XS: unpack_kquants(type, src, kc, q, scales, corrections, mins); break;
        default: unpack_blocks32(type, src, nb, q, scales, corrections); break;
      }
    }
    return {out, ld};
  }
  // What the micro-kernel over rows [r, ...) of a block of block_rows asks
  // for while it computes: their next kc columns after k1.
  NextSlice next_slice(std::size_t r, std::size_t block_rows, std::size_t k1, std::size_t kc) const {
    return kernels::next_slice(*w, r, block_rows, k1, kc);
  }
};

// The int8 tile policy of the shared gemm driver (gemm.hpp), per weight format.
template <class Format>
struct GemmInt8 {
  using Packed = std::uint8_t;
  using Weight = std::byte;
  static constexpr std::size_t kTok = kInt8Tok;
  static constexpr std::size_t kRows = 4;  // 16 accumulators (8 integer, 8 float): measured faster than 5 or 6
  // A token slice of 512 k: 16 blocks x 1408 B = 22 KB in L1; a weight block
  // of 64 rows x 640-832 B = 40-52 KB in L2.
  static constexpr std::size_t kKc = 512;
  static constexpr std::size_t kMc = 16 * kRows;

  static std::size_t packed_size(std::size_t k) { return k / 32 * kInt8BlockBytes; }
  static std::size_t packed_offset(std::size_t k0) { return k0 / 32 * kInt8BlockBytes; }
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp, std::size_t g) {
    pack_group_int8(x, ldx, n, k, xp, g);
  }
  // The last slice of k stores y itself, token-major (the driver's TokenMajorOut).
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                         std::size_t ldc, bool accumulate, TokenMajorOut out, std::index_sequence<MR...> seq) {
    gemm_int8_micro_rows<Format>(rows, w, ldw, xp, kc, c, ldc, accumulate, out, seq);
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif
