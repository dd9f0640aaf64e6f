// Matrix-matrix product for prefill and batched decode: y = x W^T with many
// tokens in x. Compute-bound, so each weight is loaded once into cache and
// used for every token.
//
// Layout: tokens run along the vector lanes and weight rows along registers.
// A micro-kernel holds a tile of kRows weight rows x kTok tokens in registers;
// per k it loads two vectors of (packed) tokens and broadcasts one weight per
// row, so the weights need no transposition: f32 rows are read in place, other
// types are converted row by row into a small buffer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>

#include "streamllm/kernels/simd.hpp"
#include "streamllm/kernels/threading.hpp"
#include "streamllm/memory.hpp"

namespace streamllm::kernels {

struct GemmTiles {
  static constexpr std::size_t kTokVecs = 2;
  static constexpr std::size_t kTok = kTokVecs * kLanes;  // tokens per micro-tile
  // Accumulators kRows x 2 plus 3 working registers: 27 of AVX-512's 32,
  // 15 of the 16 that SSE and AVX2 have.
  static constexpr std::size_t kRows = kLanes >= 16 ? 12 : 6;
  // A token slice of kKc x kTok floats (32 KB on AVX-512) stays in L1 (48 KB).
  static constexpr std::size_t kKc = 256;
  // A weight block of kMc x kKc floats (192 KB) stays in L2 (1 MB).
  static constexpr std::size_t kMc = 16 * kRows;
};

// x [n][ldx] -> xp [group][k][kTok], zero padded to whole groups.
inline void pack_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k, float* xp) {
  constexpr std::size_t T = GemmTiles::kTok;
  const std::size_t groups = (n + T - 1) / T;
  for (std::size_t g = 0; g < groups; ++g) {
    float* dst = xp + g * k * T;
    const std::size_t valid = std::min(T, n - g * T);
    for (std::size_t t = 0; t < valid; ++t) {
      const float* src = x + (g * T + t) * ldx;
      for (std::size_t kk = 0; kk < k; ++kk) dst[kk * T + t] = src[kk];
    }
    for (std::size_t t = valid; t < T; ++t)
      for (std::size_t kk = 0; kk < k; ++kk) dst[kk * T + t] = 0.f;
  }
}

// c[i][0..kTok) (+)= sum_kk w[i][kk] * xp[kk][0..kTok) for MR rows.
template <std::size_t MR>
inline void gemm_micro(const float* w, std::size_t ldw, const float* xp, std::size_t kc, float* c,
                       std::size_t ldc, bool accumulate) {
  constexpr std::size_t T = GemmTiles::kTok;
  Batch acc0[MR], acc1[MR];
#pragma GCC unroll 16
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? load(c + i * ldc) : Batch(0.f);
    acc1[i] = accumulate ? load(c + i * ldc + kLanes) : Batch(0.f);
  }
  for (std::size_t kk = 0; kk < kc; ++kk) {
    const Batch x0 = Batch::load_aligned(xp + kk * T);
    const Batch x1 = Batch::load_aligned(xp + kk * T + kLanes);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < MR; ++i) {
      const Batch wb(w[i * ldw + kk]);
      acc0[i] = xsimd::fma(wb, x0, acc0[i]);
      acc1[i] = xsimd::fma(wb, x1, acc1[i]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < MR; ++i) {
    store(c + i * ldc, acc0[i]);
    store(c + i * ldc + kLanes, acc1[i]);
  }
}

template <std::size_t... MR>
inline void gemm_micro_rows(std::size_t rows, const float* w, std::size_t ldw, const float* xp,
                            std::size_t kc, float* c, std::size_t ldc, bool accumulate,
                            std::index_sequence<MR...>) {
  ((rows == MR + 1 ? gemm_micro<MR + 1>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
}

// Weight rows as f32 in place: the source for f32 matrices.
struct F32RowSource {
  const float* w;
  std::size_t ldw;
  std::pair<const float*, std::size_t> block(std::size_t r0, std::size_t /*rows*/, std::size_t k0,
                                             std::size_t /*kc*/, AlignedVector<float>& /*scratch*/) const {
    return {w + r0 * ldw + k0, ldw};
  }
};

// y[n][ldy] = x[n][ldx] * W^T, W given by a row source of m rows x k columns.
// Source::block(r0, rows, k0, kc, scratch) returns f32 values of that block
// and their row stride, converting into `scratch` when the type needs it.
template <class Source>
inline void gemm(const Source& src, std::size_t m, std::size_t k, const float* x, std::size_t ldx,
                 std::size_t n, float* y, std::size_t ldy) {
  using G = GemmTiles;
  const std::size_t n_pad = (n + G::kTok - 1) / G::kTok * G::kTok;
  const std::size_t groups = n_pad / G::kTok;
  static thread_local AlignedVector<float> xpack, yt;
  float* xp = grow(xpack, groups * k * G::kTok);
  float* ytp = grow(yt, m * n_pad);
  pack_tokens(x, ldx, n, k, xp);

  parallel_ranges(m, G::kRows, m * k * n, [&](std::size_t rb, std::size_t re) {
    static thread_local AlignedVector<float> wscratch;
    for (std::size_t mb = rb; mb < re; mb += G::kMc) {
      const std::size_t rows = std::min(G::kMc, re - mb);
      for (std::size_t kb = 0; kb < k; kb += G::kKc) {
        const std::size_t kc = std::min(G::kKc, k - kb);
        const auto [wp, ldw] = src.block(mb, rows, kb, kc, wscratch);
        for (std::size_t g = 0; g < groups; ++g) {
          const float* xg = xp + (g * k + kb) * G::kTok;
          for (std::size_t rt = 0; rt < rows; rt += G::kRows) {
            gemm_micro_rows(std::min(G::kRows, rows - rt), wp + rt * ldw, ldw, xg, kc,
                            ytp + (mb + rt) * n_pad + g * G::kTok, n_pad, kb > 0,
                            std::make_index_sequence<G::kRows>{});
          }
        }
      }
    }
    // Each thread transposes its own rows back to token-major order.
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t r = rb; r < re; ++r) y[j * ldy + r] = ytp[r * n_pad + j];
  });
}

}  // namespace streamllm::kernels
