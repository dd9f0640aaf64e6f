// Int8 tiled matrix-matrix product (prefill) on AVX2 CPUs, for Q4_0, Q4_K
// and Q6_K weights: vpmaddubsw multiplies 32 byte pairs per instruction, so
// quantised prefill runs on the integer units instead of dequantising every
// weight to f32 (on the Zen 5 through AVX2 code, TinyLlama Q4_0 prefill, one
// thread, went from llama.cpp's speed to about twice it; docs/performance.md).
//
// The layout of the AVX-512 tiles (gemm_int8.hpp): tokens along the lanes,
// weight rows along registers, one weight quad (4 bytes) broadcast per row
// and step; the weight rows are unpacked once per block into Int8Format's
// layout, the activations quantised per token and block and stored unsigned
// (q + 128), which the weights' correction (-128 x the block's sum) cancels.
//
// vpmaddubsw saturates its pair sums at 32767, and a pair of unsigned
// activations (up to 255) with Q8_0's weights (up to 127) can pass it: Q8_0
// stays on the f32 tiles. With the small weights of the others a pair stays
// far below it, so the int16 pair sums of Run quads are added before they are
// widened (vpmaddwd) to int32: Q4_0 (|q| <= 8) 8 quads, 8 x 2 x 255 x 8 =
// 32640; Q4_K (q <= 15) 4 quads, 30600; Q6_K (|q - 32| <= 32) 2, 32640.
#pragma once

#include "streamllm/kernels/int8_tile_format.hpp"
#include "streamllm/kernels/x86_avx2.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "streamllm/error.hpp"
#include "streamllm/kernels/activations_q8.hpp"
#include "streamllm/kernels/transpose.hpp"
#include "streamllm/memory.hpp"
#include "streamllm/quant/blocks.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels::avx2 {

// Packed activations of one group of 16 tokens, per 32-block of k: eight
// quads of 16 tokens x 4 unsigned bytes (512 B), the 16 scales d, then the
// 16 products d x (sum of the block's quants), which Q4_K's mins multiply.
inline constexpr std::size_t kInt8Tok = 16;
inline constexpr std::size_t kInt8QuadBytes = 8 * kInt8Tok * 4;
inline constexpr std::size_t kInt8BlockBytes = kInt8QuadBytes + 2 * kInt8Tok * sizeof(float);

// The types these tiles take.
constexpr bool has_int8_tiles(DType t) { return t == DType::Q4_0 || t == DType::Q4_K || t == DType::Q6_K; }

template <class T>
STREAMLLM_AVX2 inline T load_scalar(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// MR rows x 16 tokens: c[i][0..16) (+)= row i's products with the tokens.
template <class Format, std::size_t Run, std::size_t MR>
STREAMLLM_AVX2 inline void gemm_int8_micro(const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                                           std::size_t ldc, bool accumulate) {
  constexpr std::size_t kSplit = Format::kSplit, kQuads = 8 / kSplit;
  static_assert(kQuads % Run == 0);
  const std::size_t nb = kc / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0[MR], acc1[MR];
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc1[i] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (std::size_t b = 0; b < nb; ++b) {
    const std::uint8_t* xb = xp + b * kInt8BlockBytes;
    const auto* dx = reinterpret_cast<const float*>(xb + kInt8QuadBytes);
    const __m256 dx0 = _mm256_load_ps(dx), dx1 = _mm256_load_ps(dx + 8);
    for (std::size_t i = 0; i < MR; ++i) {
      const std::byte* wi = w + i * ldw;
      for (std::size_t h = 0; h < kSplit; ++h) {
        const std::size_t s = b * kSplit + h;  // the scale's index in the row
        __m256i s0 = _mm256_set1_epi32(load_scalar<std::int32_t>(wi + Format::corrections_at(kc) + 4 * s)), s1 = s0;
        for (std::size_t j0 = h * kQuads; j0 < (h + 1) * kQuads; j0 += Run) {
          __m256i t0 = _mm256_setzero_si256(), t1 = t0;
          for (std::size_t j = j0; j < j0 + Run; ++j) {
            const __m256i wb = _mm256_set1_epi32(load_scalar<std::int32_t>(wi + 32 * b + 4 * j));
            const auto* xq = reinterpret_cast<const __m256i*>(xb + 64 * j);
            t0 = _mm256_add_epi16(t0, _mm256_maddubs_epi16(_mm256_load_si256(xq), wb));
            t1 = _mm256_add_epi16(t1, _mm256_maddubs_epi16(_mm256_load_si256(xq + 1), wb));
          }
          s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(t0, ones));
          s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(t1, ones));
        }
        const __m256 dw = _mm256_set1_ps(load_scalar<float>(wi + Format::scales_at(kc) + 4 * s));
        acc0[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(dw, dx0), acc0[i]);
        acc1[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(dw, dx1), acc1[i]);
      }
      if constexpr (Format::kMins) {
        const __m256 mw = _mm256_set1_ps(load_scalar<float>(wi + Format::mins_at(kc) + 4 * b));
        acc0[i] = _mm256_fmadd_ps(mw, _mm256_load_ps(dx + kInt8Tok), acc0[i]);
        acc1[i] = _mm256_fmadd_ps(mw, _mm256_load_ps(dx + kInt8Tok + 8), acc1[i]);
      }
    }
  }
  for (std::size_t i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
  }
}

// Group g of x [n][ldx] (k a multiple of 32) -> its packed blocks; padding
// tokens get quants 0 and scale 0. The scalar quantiser of the decode
// activations, so both paths round alike.
inline void pack_group_int8(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp, std::size_t g) {
  const std::size_t nb = k / 32, valid = std::min(kInt8Tok, n - g * kInt8Tok);
  std::uint8_t* dst = xp + g * nb * kInt8BlockBytes;
  std::int8_t q[32];
  for (std::size_t b = 0; b < nb; ++b) {
    std::uint8_t* blk = dst + b * kInt8BlockBytes;
    for (std::size_t t = 0; t < kInt8Tok; ++t) {
      float d = 0, dsum = 0;
      if (t < valid) {
        const auto [scale, sum] = quantize_block(x + (g * kInt8Tok + t) * ldx + 32 * b, q);
        d = scale;
        dsum = scale * static_cast<float>(sum);
      } else {
        std::fill(q, q + 32, std::int8_t{0});
      }
      for (std::size_t j = 0; j < 8; ++j)
        for (std::size_t e = 0; e < 4; ++e) blk[64 * j + 4 * t + e] = static_cast<std::uint8_t>(q[4 * j + e] ^ 0x80);
      std::memcpy(blk + kInt8QuadBytes + 4 * t, &d, 4);
      std::memcpy(blk + kInt8QuadBytes + 4 * kInt8Tok + 4 * t, &dsum, 4);
    }
  }
}

// Sums of v's unsigned bytes in runs of 16 (low half, high half).
STREAMLLM_AVX2 inline std::pair<std::int32_t, std::int32_t> byte_sums16(__m256i v) {
  alignas(32) std::uint64_t s[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), _mm256_sad_epu8(v, _mm256_setzero_si256()));
  return {static_cast<std::int32_t>(s[0] + s[1]), static_cast<std::int32_t>(s[2] + s[3])};
}

// Stores a 32-weight block of unsigned quants u as signed bytes u - offset,
// with per part (Split of them) its scale and correction -128 x sum.
template <std::size_t Split>
STREAMLLM_AVX2 inline void store_block(__m256i u, int offset, const float (&scale)[Split], std::int8_t* q, std::byte* scales,
                                       std::byte* corrections) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(u, _mm256_set1_epi8(static_cast<char>(offset))));
  const auto [lo, hi] = byte_sums16(u);
  const std::int32_t sums[2] = {lo - 16 * offset, hi - 16 * offset};
  for (std::size_t h = 0; h < Split; ++h) {
    const std::int32_t corr = -128 * (Split == 1 ? sums[0] + sums[1] : sums[h]);
    std::memcpy(scales + 4 * h, &scale[h], 4);
    std::memcpy(corrections + 4 * h, &corr, 4);
  }
}

// Rows of Q4_0, Q4_K or Q6_K weights unpacked a block at a time into
// Format's layout: Q4_0 as Int8Blocks, Q4_K as Int8Q4K, Q6_K as Int8Q6K.
template <class Format>
struct Int8Rows {
  const TensorView* w;
  STREAMLLM_AVX2 std::pair<const std::byte*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                                               AlignedVector<std::byte>& scratch) const {
    const std::size_t ld = Format::row_bytes(kc), nb = kc / 32;
    const DType type = w->type;
    const bool kquant = type == DType::Q4_K || type == DType::Q6_K;
    const bool fits = type == DType::Q4_K   ? std::is_same_v<Format, Int8Q4K>
                      : type == DType::Q6_K ? std::is_same_v<Format, Int8Q6K>
                                            : type == DType::Q4_0 && std::is_same_v<Format, Int8Blocks>;
    if (!fits || kc % 32 != 0 || (kquant && (k0 % 256 != 0 || kc % 256 != 0)))
      throw Error("avx2::Int8Rows: " + std::string(dtype_name(type)) + " rows at columns [" + std::to_string(k0) + ", " +
                  std::to_string(k0 + kc) + ") do not fit this tile format");
    std::byte* out = grow(scratch, rows * ld);
    for (std::size_t i = 0; i < rows; ++i) {
      std::byte* o = out + i * ld;
      auto* q = reinterpret_cast<std::int8_t*>(o);
      std::byte* scales = o + Format::scales_at(kc);
      std::byte* corrections = o + Format::corrections_at(kc);
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(type, static_cast<std::int64_t>(k0));
      if (type == DType::Q4_0) {
        for (std::size_t b = 0; b < nb; ++b) {
          const auto& blk = reinterpret_cast<const quant::BlockQ4_0*>(src)[b];
          const float d[1] = {_cvtsh_ss(blk.d)};
          store_block<1>(Q4_0Row::quants(blk), 8, d, q + 32 * b, scales + 4 * b, corrections + 4 * b);
        }
        continue;
      }
      for (std::size_t sb = 0; sb < kc / 256; ++sb) {
        __m256i u[8];
        if (type == DType::Q4_K) {
          const auto& blk = reinterpret_cast<const quant::BlockQ4K*>(src)[sb];
          q4k_quants(blk, u);
          const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(blk.scales);
          const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
          for (std::size_t j = 0; j < 8; ++j) {
            const float sc[1] = {d * static_cast<float>((p.scales >> (8 * j)) & 0xFF)};
            const float min = -dmin * static_cast<float>((p.mins >> (8 * j)) & 0xFF);
            const std::size_t b = 8 * sb + j;
            store_block<1>(u[j], 0, sc, q + 32 * b, scales + 4 * b, corrections + 4 * b);
            std::memcpy(o + Format::mins_at(kc) + 4 * b, &min, 4);
          }
        } else {
          const auto& blk = reinterpret_cast<const quant::BlockQ6K*>(src)[sb];
          q6k_quants(blk, u);
          const float d = _cvtsh_ss(blk.d);
          for (std::size_t j = 0; j < 8; ++j) {
            const float sc[2] = {d * static_cast<float>(blk.scales[2 * j]), d * static_cast<float>(blk.scales[2 * j + 1])};
            const std::size_t b = 8 * sb + j;
            store_block<2>(u[j], 32, sc, q + 32 * b, scales + 8 * b, corrections + 8 * b);
          }
        }
      }
    }
    return {out, ld};
  }
};

// The int8 tile policy of the shared gemm driver (gemm.hpp), per weight
// format and run of quads summed in int16.
template <class Format, std::size_t Run>
struct GemmInt8 {
  using Packed = std::uint8_t;
  using Weight = std::byte;
  static constexpr std::size_t kTok = kInt8Tok;
  // Rows per micro-tile: 3 and 2 were slower (Gemm512/Q4_0 through AVX2 on
  // the Zen 5, one thread: 161 and 157 against 164-171 GFLOP/s), and so was
  // loading each quad of tokens once for all the rows (143-152).
  static constexpr std::size_t kRows = 4;
  // A token slice of 512 k: 16 blocks x 640 B = 10 KB in L1; a weight block
  // of 64 rows x 576-640 B = 37-41 KB in L2.
  static constexpr std::size_t kKc = 512;
  static constexpr std::size_t kMc = 16 * kRows;

  static std::size_t packed_size(std::size_t k) { return k / 32 * kInt8BlockBytes; }
  static std::size_t packed_offset(std::size_t k0) { return k0 / 32 * kInt8BlockBytes; }
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint8_t* xp, std::size_t g) {
    pack_group_int8(x, ldx, n, k, xp, g);
  }
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                         std::size_t ldc, bool accumulate, std::index_sequence<MR...>) {
    ((rows == MR + 1 ? gemm_int8_micro<Format, Run, MR + 1>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
  }
  // yt [rows][ld] (tokens along rows) -> y [n][ldy].
  static void unpack(const float* yt, std::size_t ld, std::size_t rows, std::size_t n, float* y, std::size_t ldy) {
    transpose(yt, ld, rows, n, y, ldy);
  }
};

}  // namespace streamllm::kernels::avx2

#endif
