// Int8 tiled matrix-matrix product (prefill) on AVX2 CPUs, for Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS weights: vpmaddubsw
// multiplies 32 byte pairs per instruction, so quantised prefill runs on the
// integer units instead of dequantising every weight to f32
// (docs/performance.md).
//
// The layout of the AVX-512 tiles (avx512/int8_tiles.hpp): tokens along the lanes,
// weight rows along registers, one weight quad (4 bytes) broadcast per row
// and step, each weight row unpacked once per block into Int8Format's layout.
// vpmaddubsw multiplies unsigned bytes with signed ones: here the weights are
// the unsigned operand, as they are stored (Q4_0, Q4_1 and Q4_K nibbles
// 0..15, Q5_0, Q5_1 and Q5_K quants 0..31, Q6_K quants 0..63, Q3_K's 0..7,
// Q2_K's 0..3, IQ4's levels + 128, 1..241), and the activations, quantised
// per token and block as for decode, the signed one. The stored offset (Q4_0
// 8, Q5_0 16, Q6_K 32, Q3_K 4, IQ4 128) is taken back per block (or half block) as
// offset x the token's sum of quants, which is the same for every row, so
// the rows carry no corrections; Q4_1's and Q5_1's m is Q4_K's min, and
// Q2_K's -dmin m per half block multiplies the token's d x that half's sum.
//
// vpmaddubsw saturates its pair sums at 32767: Q8_0's weights (up to 127
// either way) would need the sign trick, which costs as much as the f32 tiles
// it would replace, so Q8_0 stays on those. With the others a pair stays far
// below it, and the int16 pair sums of Run quads are added before they are
// widened (vpmaddwd) to int32: the 4-bit types (q <= 15) 8 quads, 8 x 2 x 15
// x 127 = 30480; the 5-bit ones (q <= 31) 4 quads, 4 x 2 x 31 x 127 = 31496;
// Q6_K (q <= 63) 2 quads, 2 x 2 x 63 x 127 = 32004; Q3_K (q <= 7) and Q2_K
// (q <= 3) the 4 quads of their half blocks, 4 x 2 x 7 x 127 = 7112. IQ4's
// levels + 128 (q <= 241) take activations quantised to 63 instead of 127
// (GemmInt8's Limit, the row's activation_limit), one quad at a time: 2 x
// 241 x 63 = 30366. The levels themselves (4 bits of index), not the
// activations, bound IQ4's accuracy: halving the activations' step moved
// stories260K's max logit error from 5.75 to 5.85 (docs/performance.md),
// and the tiles take the weights a byte each instead of the f32 tiles' four.
#pragma once

#include "streamllm/kernels/matmul/avx2/int8_blocks.hpp"
#include "streamllm/kernels/matmul/avx2/kquants.hpp"
#include "streamllm/kernels/matmul/avx2/low_bit_kquants.hpp"
#include "streamllm/kernels/matmul/avx2/nonlinear_blocks.hpp"
#include "streamllm/kernels/matmul/int8_tile_format.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

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
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/ops/transpose.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels::avx2 {

// Packed activations of one group of 16 tokens, per 32-block of k: eight
// quads of 16 tokens x 4 signed bytes (512 B), the 16 scales d, the 16
// products d x (sum of the block's quants), which Q4_K's mins multiply, then
// the sums of the block's first and last 16 quants (16 int32 each), which
// the weights' offsets multiply.
inline constexpr std::size_t kInt8Tok = 16;
inline constexpr std::size_t kInt8QuadBytes = 8 * kInt8Tok * 4;
inline constexpr std::size_t kInt8SumsAt = kInt8QuadBytes + 2 * kInt8Tok * sizeof(float);
inline constexpr std::size_t kInt8BlockBytes = kInt8SumsAt + 2 * kInt8Tok * sizeof(std::int32_t);

template <class T>
STREAMLLM_AVX2 inline T load_scalar(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// MR rows x 16 tokens: c[i][0..16) (+)= row i's products with the tokens
// (with Half, tokens 0-7 only: the rest are padding).
// Offset: what the unsigned quants hold above the signed ones (Q4_0 8, Q6_K
// 32, Q4_K none), taken back as Offset x the tokens' block (or half) sums.
template <class Format, std::size_t Run, int Offset, std::size_t MR, bool Half>
STREAMLLM_AVX2 inline void gemm_int8_micro(const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                                           std::size_t ldc, bool accumulate) {
  constexpr std::size_t kSplit = Format::kSplit, kQuads = 8 / kSplit;
  static_assert(kQuads % Run == 0);
  const std::size_t nb = kc / 32;
  const __m256i ones = _mm256_set1_epi16(1), offset = _mm256_set1_epi32(-Offset);
  __m256 acc0[MR], acc1[MR];
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc1[i] = accumulate && !Half ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* xb = xp + b * kInt8BlockBytes;
    const auto* dx = reinterpret_cast<const float*>(xb + kInt8QuadBytes);
    const __m256 dx0 = _mm256_load_ps(dx), dx1 = _mm256_load_ps(dx + 8);
    // The offset's share of each part's integer sums, the same for every row
    // (Q4_K has none). The sums are the halves' (tokens 0-7 and 8-15 of the
    // first 16 quants, then of the last 16); a part of 32 adds both halves.
    __m256i corr0[kSplit], corr1[kSplit];
    const auto* sums = reinterpret_cast<const __m256i*>(xb + kInt8SumsAt);
    // What the mins multiply, per token: d x the block's sum (dsum), or with
    // mins per half block, d x each half's sum.
    __m256 msum0[kSplit], msum1[kSplit];
    if constexpr (Format::kMins)
      for (std::size_t h = 0; h < kSplit; ++h) {
        msum0[h] = kSplit == 1 ? _mm256_load_ps(dx + kInt8Tok) : _mm256_mul_ps(_mm256_cvtepi32_ps(sums[2 * h]), dx0);
        msum1[h] = kSplit == 1 ? _mm256_load_ps(dx + kInt8Tok + 8) : _mm256_mul_ps(_mm256_cvtepi32_ps(sums[2 * h + 1]), dx1);
      }
    for (std::size_t h = 0; h < kSplit; ++h) {
      corr0[h] = corr1[h] = _mm256_setzero_si256();
      if constexpr (Offset != 0) {
        const __m256i* half = sums + 2 * h;
        const __m256i h0 = kSplit == 1 ? _mm256_add_epi32(half[0], half[2]) : half[0];
        const __m256i h1 = kSplit == 1 ? _mm256_add_epi32(half[1], half[3]) : half[1];
        corr0[h] = _mm256_mullo_epi32(h0, offset);
        corr1[h] = _mm256_mullo_epi32(h1, offset);
      }
    }
    for (std::size_t i = 0; i < MR; ++i) {
      const std::byte* wi = w + i * ldw;
      for (std::size_t h = 0; h < kSplit; ++h) {
        const std::size_t s = b * kSplit + h;  // the scale's index in the row
        __m256i s0 = corr0[h], s1 = corr1[h];
        for (std::size_t j0 = h * kQuads; j0 < (h + 1) * kQuads; j0 += Run) {
          __m256i t0 = _mm256_setzero_si256(), t1 = t0;
          for (std::size_t j = j0; j < j0 + Run; ++j) {
            const __m256i wb = _mm256_set1_epi32(load_scalar<std::int32_t>(wi + 32 * b + 4 * j));
            const auto* xq = reinterpret_cast<const __m256i*>(xb + 64 * j);
            t0 = _mm256_add_epi16(t0, _mm256_maddubs_epi16(wb, _mm256_load_si256(xq)));
            if constexpr (!Half) t1 = _mm256_add_epi16(t1, _mm256_maddubs_epi16(wb, _mm256_load_si256(xq + 1)));
          }
          s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(t0, ones));
          if constexpr (!Half) s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(t1, ones));
        }
        const __m256 dw = _mm256_set1_ps(load_scalar<float>(wi + Format::scales_at(kc) + 4 * s));
        acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dw, dx0), acc0[i]);
        if constexpr (!Half) acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(dw, dx1), acc1[i]);
      }
      if constexpr (Format::kMins)
        for (std::size_t h = 0; h < kSplit; ++h) {
          const __m256 mw = _mm256_set1_ps(load_scalar<float>(wi + Format::mins_at(kc) + 4 * (b * kSplit + h)));
          acc0[i] = _mm256_fmadd_ps(mw, msum0[h], acc0[i]);
          if constexpr (!Half) acc1[i] = _mm256_fmadd_ps(mw, msum1[h], acc1[i]);
        }
    }
  }
  for (std::size_t i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    if constexpr (!Half) _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
  }
}

// Group g of x [n][ldx] (k a multiple of 32) -> its packed blocks, quants
// of at most `limit` either way; padding tokens get quants 0 and scale 0.
// The scalar quantiser of the decode activations, so a row's decode kernel
// and its tiles round alike (at the row's activation_limit).
inline void pack_group_int8(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp, std::size_t g,
                            float limit) {
  const std::size_t nb = k / 32, valid = std::min(kInt8Tok, n - g * kInt8Tok);
  std::uint8_t* dst = xp + g * nb * kInt8BlockBytes;
  std::int8_t q[32];
  for (std::size_t b = 0; b < nb; ++b) {
    std::uint8_t* blk = dst + b * kInt8BlockBytes;
    for (std::size_t t = 0; t < kInt8Tok; ++t) {
      float d = 0, dsum = 0;
      if (t < valid) {
        const auto [scale, sum] = quantize_block_to(x + (g * kInt8Tok + t) * ldx + 32 * b, q, limit);
        d = scale;
        dsum = scale * static_cast<float>(sum);
      } else {
        std::fill(q, q + 32, std::int8_t{0});
      }
      const std::int32_t halves[2] = {sum_of_16(q), sum_of_16(q + 16)};
      for (std::size_t j = 0; j < 8; ++j) std::memcpy(blk + 64 * j + 4 * t, q + 4 * j, 4);
      std::memcpy(blk + kInt8QuadBytes + 4 * t, &d, 4);
      std::memcpy(blk + kInt8QuadBytes + 4 * kInt8Tok + 4 * t, &dsum, 4);
      std::memcpy(blk + kInt8SumsAt + 4 * t, &halves[0], 4);
      std::memcpy(blk + kInt8SumsAt + 4 * kInt8Tok + 4 * t, &halves[1], 4);
    }
  }
}

// Super-block sb of a Q4_K or Q5_K row as Int8Q4K lays it out: the quants,
// d sc and -dmin m per block of 32.
template <class Block>
STREAMLLM_AVX2 inline void unpack_affine_k(const Block& blk, __m256i (&u)[8], std::int8_t* q, std::byte* scales, std::byte* mins,
                                           std::size_t sb) {
  if constexpr (std::is_same_v<Block, quant::BlockQ4K>)
    q4k_quants(blk, u);
  else
    q5k_quants(blk, u);
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(blk.scales);
  const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
  for (std::size_t j = 0; j < 8; ++j) {
    const float sc = d * static_cast<float>((p.scales >> (8 * j)) & 0xFF);
    const float min = -dmin * static_cast<float>((p.mins >> (8 * j)) & 0xFF);
    const std::size_t b = 8 * sb + j;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), u[j]);
    std::memcpy(scales + 4 * b, &sc, 4);
    std::memcpy(mins + 4 * b, &min, 4);
  }
}

// Super-block sb of a Q3_K row as Int8Q6K lays it out: the quants as
// stored (q + 4, 0..7), d (sc - 32) per half block.
STREAMLLM_AVX2 inline void unpack_q3k(const quant::BlockQ3K& blk, std::int8_t* q, std::byte* scales, std::size_t sb) {
  alignas(16) std::int8_t sc[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(sc), q3k_scales_i8(blk.scales));
  const float d = _cvtsh_ss(blk.d);
  const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
  for (int j = 0; j < 8; ++j) {
    const std::size_t b = 8 * sb + static_cast<std::size_t>(j);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), q3k_unsigned_quants(blk, hmask, j));
    const float half[2] = {d * static_cast<float>(sc[2 * j]), d * static_cast<float>(sc[2 * j + 1])};
    std::memcpy(scales + 8 * b, half, 8);
  }
}

// Super-block sb of a Q2_K row as Int8Q2K lays it out: the quants (0..3),
// d (sc & 15) and -dmin (sc >> 4) per half block.
STREAMLLM_AVX2 inline void unpack_q2k(const quant::BlockQ2K& blk, std::int8_t* q, std::byte* scales, std::byte* mins,
                                      std::size_t sb) {
  const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
  for (int j = 0; j < 8; ++j) {
    const std::size_t b = 8 * sb + static_cast<std::size_t>(j);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), low2_bits(blk.qs, j));
    for (std::size_t h = 0; h < 2; ++h) {
      const std::uint8_t sc = blk.scales[2 * j + static_cast<int>(h)];
      const float scale = d * static_cast<float>(sc & 0xF), min = -dmin * static_cast<float>(sc >> 4);
      std::memcpy(scales + 4 * (2 * b + h), &scale, 4);
      std::memcpy(mins + 4 * (2 * b + h), &min, 4);
    }
  }
}

// Blocks [0, nb) of a row of Row's type (int8_blocks.hpp: Q4_0, Q4_1, Q5_0,
// Q5_1) as Int8Blocks or (with m, kMin) Int8Q4K lays them out: the unsigned
// quants, d and m per block.
template <class Row>
STREAMLLM_AVX2 inline void unpack_unsigned_blocks(const std::byte* src, std::size_t nb, std::int8_t* q, std::byte* scales,
                                                  std::byte* mins) {
  const auto* blk = reinterpret_cast<const typename Row::Block*>(src);
  for (std::size_t b = 0; b < nb; ++b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), Row::quants(blk[b]));
    const float d = _cvtsh_ss(blk[b].d);
    std::memcpy(scales + 4 * b, &d, 4);
    if constexpr (Row::kMin) {
      const float m = _cvtsh_ss(blk[b].m);
      std::memcpy(mins + 4 * b, &m, 4);
    }
  }
}

// Blocks [0, nb) of an IQ4_NL row, or super-blocks [0, nb / 8) of an IQ4_XS
// one, as Int8Blocks lays them out: the levels + 128 and each block's scale
// (IQ4_NL's d, IQ4_XS's d (ls - 32)).
STREAMLLM_AVX2 inline void unpack_iq4(DType type, const std::byte* src, std::size_t nb, std::int8_t* q, std::byte* scales) {
  if (type == DType::IQ4_NL) {
    const auto* blk = reinterpret_cast<const quant::BlockIQ4NL*>(src);
    for (std::size_t b = 0; b < nb; ++b) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), iq4_unsigned_levels(blk[b].qs));
      const float d = _cvtsh_ss(blk[b].d);
      std::memcpy(scales + 4 * b, &d, 4);
    }
    return;
  }
  const auto* blk = reinterpret_cast<const quant::BlockIQ4XS*>(src);
  for (std::size_t sb = 0; sb < nb / 8; ++sb) {
    for (std::size_t j = 0; j < 8; ++j)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * (8 * sb + j)), iq4_unsigned_levels(blk[sb].qs + 16 * j));
    _mm256_storeu_ps(reinterpret_cast<float*>(scales + 32 * sb), x86::iq4xs_scales(blk[sb]));
  }
}

// One super-block of each K-quant type, as Int8Rows' formats lay it out.
STREAMLLM_AVX2 inline void unpack_super_block(const quant::BlockQ4K& b, std::int8_t* q, std::byte* scales, std::byte* mins,
                                              std::size_t sb) {
  __m256i u[8];
  unpack_affine_k(b, u, q, scales, mins, sb);
}
STREAMLLM_AVX2 inline void unpack_super_block(const quant::BlockQ5K& b, std::int8_t* q, std::byte* scales, std::byte* mins,
                                              std::size_t sb) {
  __m256i u[8];
  unpack_affine_k(b, u, q, scales, mins, sb);
}
STREAMLLM_AVX2 inline void unpack_super_block(const quant::BlockQ3K& b, std::int8_t* q, std::byte* scales, std::byte*,
                                              std::size_t sb) {
  unpack_q3k(b, q, scales, sb);
}
STREAMLLM_AVX2 inline void unpack_super_block(const quant::BlockQ2K& b, std::int8_t* q, std::byte* scales, std::byte* mins,
                                              std::size_t sb) {
  unpack_q2k(b, q, scales, mins, sb);
}
STREAMLLM_AVX2 inline void unpack_super_block(const quant::BlockQ6K& b, std::int8_t* q, std::byte* scales, std::byte*,
                                              std::size_t sb) {
  __m256i u[8];
  q6k_quants(b, u);
  const float d = _cvtsh_ss(b.d);
  for (std::size_t j = 0; j < 8; ++j) {
    const float sc[2] = {d * static_cast<float>(b.scales[2 * j]), d * static_cast<float>(b.scales[2 * j + 1])};
    const std::size_t blk = 8 * sb + j;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * blk), u[j]);
    std::memcpy(scales + 8 * blk, sc, 8);
  }
}

// The super-blocks of a row's kc columns, of one block type.
template <class Block>
STREAMLLM_AVX2 inline void unpack_super_blocks(const std::byte* src, std::size_t kc, std::int8_t* q, std::byte* scales,
                                               std::byte* mins) {
  const auto* blk = reinterpret_cast<const Block*>(src);
  for (std::size_t sb = 0; sb < kc / 256; ++sb) unpack_super_block(blk[sb], q, scales, mins, sb);
}

// Rows of Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K, IQ4_NL or
// IQ4_XS weights unpacked a block at a time into Format's layout: Q4_0,
// Q5_0 and the IQ4 types as Int8Blocks, Q4_1, Q5_1, Q4_K and Q5_K as
// Int8Q4K, Q6_K and Q3_K as Int8Q6K, Q2_K as Int8Q2K, each quant as the
// unsigned byte it is stored as (IQ4: its level + 128; the micro-kernel
// takes the offset back); the layout's corrections are not used here.
template <class Format>
struct Int8Rows {
  const TensorView* w;
  STREAMLLM_AVX2 std::pair<const std::byte*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                                                AlignedVector<std::byte>& scratch) const {
    const std::size_t ld = Format::row_bytes(kc), nb = kc / 32;
    const DType type = w->type;
    const bool super_blocks = traits(type).block_elems == 256;  // the K-quants, Q2_K and Q3_K among them
    const bool affine = type == DType::Q4_K || type == DType::Q5_K || type == DType::Q4_1 || type == DType::Q5_1;
    const bool fits = affine                                       ? std::is_same_v<Format, Int8Q4K>
                      : type == DType::Q6_K || type == DType::Q3_K ? std::is_same_v<Format, Int8Q6K>
                      : type == DType::Q2_K
                          ? std::is_same_v<Format, Int8Q2K>
                          : (type == DType::Q4_0 || type == DType::Q5_0 || type == DType::IQ4_NL || type == DType::IQ4_XS) &&
                                std::is_same_v<Format, Int8Blocks>;
    if (!fits || kc % 32 != 0 || (super_blocks && (k0 % 256 != 0 || kc % 256 != 0)))
      throw Error("avx2::Int8Rows: " + std::string(dtype_name(type)) + " rows at columns [" + std::to_string(k0) + ", " +
                  std::to_string(k0 + kc) + ") do not fit this tile format");
    std::byte* out = grow(scratch, rows * ld);
    // No prefetch of the rows' next slice here: asked for in a burst as each
    // row unpacks, it slowed this family's prefill (kernel-measurements.md).
    for (std::size_t i = 0; i < rows; ++i) {
      std::byte* o = out + i * ld;
      auto* q = reinterpret_cast<std::int8_t*>(o);
      std::byte* scales = o + Format::scales_at(kc);
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(type, static_cast<std::int64_t>(k0));
      std::byte* mins = o + Format::mins_at(kc);
      // The row's type chosen once per row, not once per block.
      switch (type) {
        case DType::Q4_0: unpack_unsigned_blocks<x86::Q4_0Row>(src, nb, q, scales, mins); continue;
        case DType::Q5_0: unpack_unsigned_blocks<x86::Q5_0Row>(src, nb, q, scales, mins); continue;
        case DType::Q4_1: unpack_unsigned_blocks<x86::Q4_1Row>(src, nb, q, scales, mins); continue;
        case DType::Q5_1: unpack_unsigned_blocks<x86::Q5_1Row>(src, nb, q, scales, mins); continue;
        case DType::IQ4_NL:
        case DType::IQ4_XS: unpack_iq4(type, src, nb, q, scales); continue;
        case DType::Q4_K: unpack_super_blocks<quant::BlockQ4K>(src, kc, q, scales, mins); break;
        case DType::Q5_K: unpack_super_blocks<quant::BlockQ5K>(src, kc, q, scales, mins); break;
        case DType::Q6_K: unpack_super_blocks<quant::BlockQ6K>(src, kc, q, scales, mins); break;
        case DType::Q3_K: unpack_super_blocks<quant::BlockQ3K>(src, kc, q, scales, mins); break;
        case DType::Q2_K: unpack_super_blocks<quant::BlockQ2K>(src, kc, q, scales, mins); break;
        default: break;  // no other type fits (checked above)
      }
    }
    return {out, ld};
  }
};

// The int8 tile policy of the shared gemm driver (gemm.hpp), per weight
// format, run of quads summed in int16, offset of the unsigned quants and
// the activations' limit.
template <class Format, std::size_t Run, int Offset, int Limit = 127>
struct GemmInt8 {
  using Packed = std::uint8_t;
  using Weight = std::byte;
  static constexpr std::size_t kTok = kInt8Tok;
  // Rows per micro-tile: 3 and 2 were slower, and so was loading each quad
  // of tokens once for all the rows.
  static constexpr std::size_t kRows = 4;
  // A token slice of 512 k: 16 blocks x 768 B = 12 KB in L1; a weight block
  // of 64 rows x 576-640 B = 37-41 KB in L2.
  static constexpr std::size_t kKc = 512;
  static constexpr std::size_t kMc = 16 * kRows;

  static std::size_t packed_size(std::size_t k) { return k / 32 * kInt8BlockBytes; }
  static std::size_t packed_offset(std::size_t k0) { return k0 / 32 * kInt8BlockBytes; }
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp, std::size_t g) {
    pack_group_int8(x, ldx, n, k, xp, g, static_cast<float>(Limit));
  }
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                         std::size_t ldc, bool accumulate, bool half, std::index_sequence<MR...>) {
    if (half)
      ((rows == MR + 1 ? gemm_int8_micro<Format, Run, Offset, MR + 1, true>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
    else
      ((rows == MR + 1 ? gemm_int8_micro<Format, Run, Offset, MR + 1, false>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
  }
  // yt [rows][ld] (tokens along rows) -> y [n][ldy].
  static void unpack(const float* yt, std::size_t ld, std::size_t rows, std::size_t n, float* y, std::size_t ldy) {
    transpose(yt, ld, rows, n, y, ldy);
  }
};

}  // namespace streamllm::kernels::avx2

#endif
