// Matrix-matrix product for prefill and batched decode: y = x W^T with many
// tokens in x. Compute-bound, so each weight is loaded once into cache and
// used for every token.
//
// Layout: tokens run along the vector lanes and weight rows along registers.
// A micro-kernel holds a tile of weight rows x tokens in registers; per step
// of k it loads the (packed) tokens and broadcasts one weight per row, so the
// weights need no transposition: rows are read in place when their type is
// the kernel's, or converted a block at a time into a small buffer.
//
// The driver is shared by the element types and ISAs: the f32 tiles of
// every kernel family (f32_tiles-inl.hpp, below); bf16 pairs with vdpbf16ps
// (avx512::GemmBf16) and the AVX-512 f32 and int8 tiles in
// avx512/float_tiles.hpp and avx512/int8_tiles.hpp; AVX2's int8 tiles in
// avx2/int8_tiles.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "streamllm/core/memory.hpp"
#include "streamllm/kernels/matmul/prefetch_rows.hpp"
#include "streamllm/kernels/ops/transpose.hpp"
#include "streamllm/kernels/runtime/threading.hpp"

namespace streamllm::kernels {

// Weight rows of the kernel's own type, copied a block at a time into a
// compact buffer: read in place, rows a whole matrix row apart would fall
// into the same few cache sets and be fetched from DRAM inside the kernel.
template <class T>
struct CopyRows {
  const T* w;
  std::size_t ldw;  // elements between rows
  std::pair<const T*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                         AlignedVector<T>& scratch) const {
    T* out = grow(scratch, rows * kc);
    for (std::size_t i = 0; i < rows; ++i) std::memcpy(out + i * kc, w + (r0 + i) * ldw + k0, kc * sizeof(T));
    return {out, kc};
  }
};
using F32RowSource = CopyRows<float>;

// Tokens whose partial sums a row block carries from one k slice to the next
// (kMc rows x these tokens: 192-384 KB). They and the packed tokens of a
// slice stay in L2 between slices, and each pass's results go back to y
// while still there: faster than one m x n buffer of all tokens' sums,
// transposed at the end. Each pass converts the weight block again, so a
// prompt chunk of the default 512 tokens is one pass.
inline constexpr std::size_t kTokensPerPass = 512;

// Where a policy whose micro-kernel writes y itself (token-major, in
// registers) puts the last slice of k: y at the tile's first token and row,
// and how many of its tokens are real. Null y: every other slice.
// `next`: what the tile's rows are read for next (a source's next_slice; in
// the first group of a pass only), which the micro-kernel asks for as it
// computes.
struct TokenMajorOut {
  float* y;
  std::size_t ldy, tokens;
  NextSlice next{};
};

template <class K>
concept StoresTokenMajor = requires(std::size_t n, const typename K::Weight* w, const typename K::Packed* xp, float* c) {
  K::micro_rows(n, w, n, xp, n, c, n, false, TokenMajorOut{}, std::make_index_sequence<K::kRows>{});
};

// A policy whose micro-kernel can leave out the second half of a group's
// tokens: a group that is half padding (the last of a prompt, or a short
// one) costs half the arithmetic. A chat turn ends on a part group more
// often than not.
template <class K>
concept SkipsHalfGroups = requires(std::size_t n, const typename K::Weight* w, const typename K::Packed* xp, float* c) {
  K::micro_rows(n, w, n, xp, n, c, n, false, false, std::make_index_sequence<K::kRows>{});
};

// x [n][ldx] (k columns) packed in groups of K::kTok tokens for Kernel's
// micro-kernel, in the calling thread's buffer: valid until its next call.
template <class Kernel>
inline const typename Kernel::Packed* pack_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k) {
  using K = Kernel;
  const std::size_t groups = (n + K::kTok - 1) / K::kTok;
  static thread_local AlignedVector<typename K::Packed> xpack;
  auto* xp = grow(xpack, groups * K::packed_size(k));
  // Token groups are packed in parallel: with many tokens this is not small.
  parallel_chunks(groups, 1, n * k, [&](std::size_t g0, std::size_t g1) {
    for (std::size_t g = g0; g < g1; ++g) K::pack_group(x, ldx, n, k, xp, g);
  });
  return xp;
}

// y[n][ldy] = x W^T from tokens already packed (pack_tokens), so that
// matrices that read the same activations (wq, wk, wv) pack them once.
template <class Kernel, class Source>
inline void gemm_packed(const Source& src, std::size_t m, std::size_t k, const typename Kernel::Packed* xp, std::size_t n,
                        float* y, std::size_t ldy) {
  using K = Kernel;
  const std::size_t groups = (n + K::kTok - 1) / K::kTok;
  const std::size_t group_size = K::packed_size(k);
  const std::size_t pass_groups = std::max<std::size_t>(1, kTokensPerPass / K::kTok);
  const std::size_t ld = pass_groups * K::kTok;  // tokens per row of a pass's sums
  // Row blocks of a quarter of each thread's share at most (parallel_chunks):
  // on a shared host one core can run slower for a while, and the other
  // takes its last blocks instead of waiting. Small matrices (wk, wv) still
  // give each thread several.
  const auto threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  const std::size_t quarter = (m + 4 * threads - 1) / (4 * threads);
  const std::size_t chunk = std::min(K::kMc, (quarter + K::kRows - 1) / K::kRows * K::kRows);
  parallel_chunks(m, chunk, m * k * n, [&](std::size_t rb, std::size_t re) {
    static thread_local AlignedVector<typename K::Weight> wscratch;
    static thread_local AlignedVector<float> sums;  // [kMc][ld], rows x tokens
    float* c = grow(sums, K::kMc * ld);
    for (std::size_t mb = rb; mb < re; mb += K::kMc) {
      const std::size_t rows = std::min(K::kMc, re - mb);
      for (std::size_t g0 = 0; g0 < groups; g0 += pass_groups) {
        const std::size_t g1 = std::min(groups, g0 + pass_groups);
        for (std::size_t kb = 0; kb < k; kb += K::kKc) {
          const std::size_t kc = std::min(K::kKc, k - kb);
          const auto [wp, ldw] = src.block(mb, rows, kb, kc, wscratch);
          for (std::size_t g = g0; g < g1; ++g) {
            const auto* xg = xp + g * group_size + K::packed_offset(kb);
            for (std::size_t rt = 0; rt < rows; rt += K::kRows) {
              float* ct = c + rt * ld + (g - g0) * K::kTok;
              const std::size_t mr = std::min(K::kRows, rows - rt);
              if constexpr (StoresTokenMajor<K>) {
                const bool last = kb + kc == k;
                TokenMajorOut out{last ? y + g * K::kTok * ldy + mb + rt : nullptr, ldy, std::min(K::kTok, n - g * K::kTok)};
                if constexpr (requires { src.next_slice(mb, rows, k, kc); })
                  if (g == g0) out.next = src.next_slice(mb + rt, rows, kb + kc, kc);
                K::micro_rows(mr, wp + rt * ldw, ldw, xg, kc, ct, ld, kb > 0, out, std::make_index_sequence<K::kRows>{});
              } else if constexpr (SkipsHalfGroups<K>) {
                const bool half = n - g * K::kTok <= K::kTok / 2;
                K::micro_rows(mr, wp + rt * ldw, ldw, xg, kc, ct, ld, kb > 0, half, std::make_index_sequence<K::kRows>{});
              } else {
                K::micro_rows(mr, wp + rt * ldw, ldw, xg, kc, ct, ld, kb > 0, std::make_index_sequence<K::kRows>{});
              }
            }
          }
        }
        // This pass's tokens, back to token-major order while still in L2.
        if constexpr (!StoresTokenMajor<K>) {
          const std::size_t t0 = g0 * K::kTok, t1 = std::min(n, g1 * K::kTok);
          K::unpack(c, ld, rows, t1 - t0, y + t0 * ldy + mb, ldy);
        }
      }
    }
  });
}

// y[n][ldy] = x[n][ldx] * W^T, W given by a row source of m rows x k columns.
// Source::block(r0, rows, k0, kc, scratch) returns that block's values in the
// kernel's weight type and their row stride, converting into `scratch` when needed.
template <class Kernel, class Source>
inline void gemm(const Source& src, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                 std::size_t ldy) {
  gemm_packed<Kernel>(src, m, k, pack_tokens<Kernel>(x, ldx, n, k), n, y, ldy);
}

}  // namespace streamllm::kernels

// The f32 tiles of each kernel family: portable::GemmF32, avx2::GemmF32, avx512::GemmF32.
#include "streamllm/kernels/simd/vec.hpp"
#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/matmul/f32_tiles-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"
