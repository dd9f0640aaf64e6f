// AVX-512 tiles for prefill of float rows: the bf16 tiles (vdpbf16ps) for
// BF16 and F16 weights where the CPU runs them at full rate, and the f32
// tiles with their tokens packed and results unpacked by register transposes.
#pragma once

#include "streamllm/core/memory.hpp"
#include "streamllm/kernels/matmul/avx512/isa.hpp"
#include "streamllm/kernels/matmul/gemm.hpp"
#include "streamllm/kernels/ops/transpose.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// ---- BF16 tiled matrix-matrix (prefill) ----------------------------------------
//
// Tokens along the lanes as bf16 pairs: a packed group holds, for each pair
// of k, 32 tokens x (x[k], x[k+1]). Weight rows are read as bf16 pairs,
// broadcast, and vdpbf16ps adds w[k]x[k] + w[k+1]x[k+1] into each token's lane.

inline constexpr std::size_t kBf16Tok = 32;   // tokens per micro-tile (two zmm)
inline constexpr std::size_t kBf16Rows = 12;  // weight rows per micro-tile: 24 accumulators

// c[i][0..32) (+)= the MR rows' products with a group's 32 tokens; with
// Half, the first 16 only (the rest are padding: a batch of 9-16 sequences,
// a short prompt's last group), at half the arithmetic.
template <std::size_t MR, bool Half>
STREAMLLM_AVX512 inline void gemm_bf16_micro(const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp, std::size_t kc,
                                             float* c, std::size_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate && !Half ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (std::size_t kk = 0; kk < kc; kk += 2) {
    const __m512bh x0 = (__m512bh)_mm512_load_si512(xp + kk * kBf16Tok);
    const __m512bh x1 = Half ? x0 : (__m512bh)_mm512_load_si512(xp + kk * kBf16Tok + 32);
    for (std::size_t i = 0; i < MR; ++i) {
      std::int32_t pair;
      std::memcpy(&pair, w + i * ldw + kk, 4);
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(pair);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], x0, wb);
      if constexpr (!Half) acc1[i] = _mm512_dpbf16_ps(acc1[i], x1, wb);
    }
  }
  for (std::size_t i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    if constexpr (!Half) _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

template <std::size_t... MR>
STREAMLLM_AVX512 inline void gemm_bf16_micro_rows(std::size_t rows, const std::uint16_t* w, std::size_t ldw,
                                                  const std::uint16_t* xp, std::size_t kc, float* c, std::size_t ldc,
                                                  bool accumulate, bool half, std::index_sequence<MR...>) {
  if (half)
    ((rows == MR + 1 ? gemm_bf16_micro<MR + 1, true>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
  else
    ((rows == MR + 1 ? gemm_bf16_micro<MR + 1, false>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
}

// n floats -> bf16 (round to nearest even).
STREAMLLM_AVX512 inline void f32_to_bf16_row(const float* src, std::size_t n, std::uint16_t* dst) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// n halves -> bf16: widened to f32 (exact), then rounded to nearest even, so
// f16's 11 significant bits become bf16's 8 (a relative error of at most
// 2^-9, as the tokens' own rounding here).
STREAMLLM_AVX512 inline void f16_to_bf16_row(const std::uint16_t* src, std::size_t n, std::uint16_t* dst) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512 hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 16)));
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(f16_to_f32(src[i]));
}

// F16 rows for the bf16 tiles, converted a block at a time into the
// thread's buffer (as CopyRows copies BF16's): on a CPU whose bf16 dot runs
// at twice its FP32 FMA rate, F16 prefill takes the bf16 tiles, not f32 ones.
struct F16AsBf16Rows {
  const std::uint16_t* w;
  std::size_t ldw;  // halves between rows
  std::pair<const std::uint16_t*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                                     AlignedVector<std::uint16_t>& scratch) const {
    std::uint16_t* out = grow(scratch, rows * kc);
    for (std::size_t i = 0; i < rows; ++i) f16_to_bf16_row(w + (r0 + i) * ldw + k0, kc, out + i * kc);
    return {out, kc};
  }
};

// Group g of x [n][ldx] (k even) -> 32 tokens as bf16 pairs [group][k/2][32][2]:
// each token row to bf16, then pairs (as 32-bit words) transposed in tiles.
inline void pack_group_bf16(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint16_t* xp, std::size_t g) {
  static thread_local AlignedVector<std::uint16_t> rows;
  std::uint16_t* tmp = grow(rows, kBf16Tok * k);
  const std::size_t valid = std::min(kBf16Tok, n - g * kBf16Tok);
  for (std::size_t t = 0; t < valid; ++t) f32_to_bf16_row(x + (g * kBf16Tok + t) * ldx, k, tmp + t * k);
  auto* dst = reinterpret_cast<std::uint32_t*>(xp) + g * (k / 2) * kBf16Tok;
  transpose(reinterpret_cast<const std::uint32_t*>(tmp), k / 2, valid, k / 2, dst, kBf16Tok);
  for (std::size_t p = 0; p < k / 2; ++p)
    for (std::size_t t = valid; t < kBf16Tok; ++t) dst[p * kBf16Tok + t] = 0;
}

// 16 x 16 floats transposed in registers (unpack, then 128-bit lane shuffles).
STREAMLLM_AVX512 inline void transpose16x16(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + static_cast<std::size_t>(i) * src_ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + j + 2] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // r[4q + c] now holds, in each 128-bit lane L, column 4L + c' of rows 4q..4q+3
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], _MM_SHUFFLE(2, 0, 2, 0));
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], _MM_SHUFFLE(3, 1, 3, 1));
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], _MM_SHUFFLE(2, 0, 2, 0));
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], _MM_SHUFFLE(3, 1, 3, 1));
  }
  static constexpr int order[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + static_cast<std::size_t>(c) * dst_ld, r[order[c]]);
}

// dst[j][i] = src[i][j], 16 x 16 blocks in registers, the edges element by element.
// Along dst's rows first: the tiles' results (dst: y, tokens x outputs, in
// memory) are written a row's run of lines at a time, not one line in each of
// 16 rows per step, which took a larger share of a prefill.
STREAMLLM_AVX512 inline void transpose_f32(const float* src, std::size_t src_ld, std::size_t rows, std::size_t cols, float* dst,
                                           std::size_t dst_ld) {
  const std::size_t R = rows / 16 * 16, C = cols / 16 * 16;
  for (std::size_t j = 0; j < C; j += 16)
    for (std::size_t i = 0; i < R; i += 16) transpose16x16(src + i * src_ld + j, src_ld, dst + j * dst_ld + i, dst_ld);
  if (R < rows) transpose(src + R * src_ld, src_ld, rows - R, cols, dst + R, dst_ld);
  if (C < cols) transpose(src + C, src_ld, R, cols - C, dst + C * dst_ld, dst_ld);
}

// What the AVX-512 tile policies share: results come back to token-major
// order through 16 x 16 register transposes.
struct TransposeBack {
  static void unpack(const float* yt, std::size_t ld, std::size_t rows, std::size_t n, float* y, std::size_t ldy) {
    transpose_f32(yt, ld, rows, n, y, ldy);
  }
};

// The f32 tiles (gemm.hpp) with tokens packed and results unpacked by the
// register transposes: element by element, the two transposes took a tenth
// of an F16 prefill (TinyLlama, 512 tokens, one thread).
struct GemmF32Transposed : GemmF32, TransposeBack {
  using TransposeBack::unpack;
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, float* xp, std::size_t g) {
    pack_group_by(transpose_f32, x, ldx, n, k, xp, g);
  }
};

// The bf16 tile policy of the shared gemm driver (gemm.hpp).
struct GemmBf16 : TransposeBack {
  using Packed = std::uint16_t;
  using Weight = std::uint16_t;
  static constexpr std::size_t kTok = kBf16Tok;
  static constexpr std::size_t kRows = kBf16Rows;
  // A token slice of 512 k x 32 tokens x 2 B = 32 KB stays in L1 (48 KB);
  // a weight block of 192 rows x 512 x 2 B = 192 KB in L2 (1 MB). 512 is a
  // multiple of every block size (32, 256), so blocks convert whole.
  static constexpr std::size_t kKc = 256;
  static constexpr std::size_t kMc = 16 * kRows;

  static std::size_t packed_size(std::size_t k) { return k * kTok; }
  static std::size_t packed_offset(std::size_t k0) { return k0 * kTok; }
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint16_t* xp, std::size_t g) {
    pack_group_bf16(x, ldx, n, k, xp, g);
  }
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp, std::size_t kc,
                         float* c, std::size_t ldc, bool accumulate, bool half, std::index_sequence<MR...> seq) {
    gemm_bf16_micro_rows(rows, w, ldw, xp, kc, c, ldc, accumulate, half, seq);
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
