// y = x W^T for a weight matrix of any supported type: the one dispatch per
// matrix call, written once against the kernel table (kernel_table.hpp).
// The row of the weight's type on the active ISA says which decode kernel
// serves how many tokens and how it reads them, and which tiles take the
// rest; what each ISA runs for each type is in its rows.hpp.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "streamllm/kernels/matmul/gemm.hpp"
#include "streamllm/kernels/matmul/kernel_table.hpp"
#include "streamllm/kernels/matmul/portable/float_rows.hpp"
#include "streamllm/kernels/runtime/threading.hpp"
#include "streamllm/quant/blocks.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

// Few tokens: the rows in chunks over the threads, in passes of up to
// kernel.decode_tokens (each pass reads the weights again), each pass's
// tokens quantised first where the kernel reads int8.
inline void decode(const MatmulKernel& kernel, const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y,
                   std::size_t ldy) {
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  for (std::size_t t0 = 0; t0 < n; t0 += kernel.decode_tokens) {
    const std::size_t nt = std::min(kernel.decode_tokens, n - t0);
    const float* xt = x + t0 * ldx;
    float* yt = y + t0 * ldy;
    const DecodeInput in{xt, ldx, kernel.quantize ? kernel.quantize(xt, ldx, nt, k) : nullptr};
    parallel_chunks(m, gemv_chunk_rows(static_cast<std::size_t>(w.row_stride), m, nt), m * k * nt,
                    [&](std::size_t r0, std::size_t r1) { kernel.decode(w, r0, r1, in, nt, yt, ldy); });
  }
}

// y[n][ldy] = x[n][ldx] * W^T, for the first W.rows outputs of each row of y.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy,
                   Isa isa = active_isa()) {
  if (n == 0) return;
  const MatmulKernel& kernel = matmul_kernel(w.type, isa);
  const std::size_t tiled = kernel.decode_from(n);
  if (tiled > 0) kernel.prefill(w, x, tiled, ldx, y, ldy);
  if (tiled < n) decode(kernel, w, x + tiled * ldx, n - tiled, ldx, y + tiled * ldy, ldy);
}

// f32 rows in place (not a view): the classifier of a model built in memory, tests.
inline void gemv_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                     std::size_t ldy) {
  parallel_chunks(m, gemv_chunk_rows(k * sizeof(float), m, n), m * k * n, [&](std::size_t r0, std::size_t r1) {
    in_token_passes(n, [&]<int NT>(std::size_t t0) { gemv_f32_rows<NT>(w, k, k, x + t0 * ldx, ldx, y + t0 * ldy, ldy, r0, r1); });
  });
}

inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                       std::size_t ldy) {
  if (n <= kMaxGemvTokens)
    gemv_f32(w, m, k, x, ldx, n, y, ldy);
  else
    gemm<GemmF32>(F32RowSource{w, k}, m, k, x, ldx, n, y, ldy);
}

// One product of matmul_shared: y[n][ldy] = x W^T.
struct MatmulTarget {
  const TensorView* w;
  float* y;
  std::size_t ldy;
};

namespace detail {
// Decode of several matrices whose kernels read the same int8 layout: the
// tokens quantised once, and the rows of all the matrices chunks of one
// parallel loop: one fork-join instead of several, and the small matrices'
// chunks fill the threads' tails.
inline void decode_shared(std::span<const MatmulTarget> targets, std::span<const MatmulKernel* const> kernels, const float* x,
                          std::size_t n, std::size_t ldx) {
  const auto k = static_cast<std::size_t>(targets[0].w->cols);
  const DecodeInput in{x, ldx, kernels[0]->quantize(x, ldx, n, k)};
  struct Chunk {
    const MatmulTarget* target;
    const MatmulKernel* kernel;
    std::size_t r0, r1;
  };
  static thread_local std::vector<Chunk> chunks;
  chunks.clear();
  std::size_t work = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto m = static_cast<std::size_t>(targets[i].w->rows);
    const std::size_t rows = gemv_chunk_rows(static_cast<std::size_t>(targets[i].w->row_stride), m, n);
    for (std::size_t r0 = 0; r0 < m; r0 += rows) chunks.push_back({&targets[i], kernels[i], r0, std::min(m, r0 + rows)});
    work += m * k * n;
  }
  const Chunk* list = chunks.data();  // the workers must not read their own thread_local
  parallel_chunks(chunks.size(), 1, work, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c)
      list[c].kernel->decode(*list[c].target->w, list[c].r0, list[c].r1, in, n, list[c].target->y, list[c].target->ldy);
  });
}
}  // namespace detail

// Several matrices against the same activations (wq, wk, wv; w_gate, w_up).
// Where their decode kernels read the same int8 layout at the same limit
// (Q4_K with Q6_K, as a Q4_K_M file mixes them), the tokens are quantised once for all
// (detail::decode_shared); where their tiles read the same packed tokens,
// whatever their formats, the tokens are packed once. Otherwise one matmul
// per target.
inline void matmul_shared(std::span<const MatmulTarget> targets, const float* x, std::size_t n, std::size_t ldx,
                          Isa isa = active_isa()) {
  if (n == 0 || targets.empty()) return;
  static thread_local std::vector<const MatmulKernel*> kernels;
  kernels.clear();
  for (const MatmulTarget& t : targets) kernels.push_back(&matmul_kernel(t.w->type, isa));
  const MatmulKernel& first = *kernels[0];
  const auto k = static_cast<std::size_t>(targets[0].w->cols);
  auto all = [&](auto&& same) {
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (static_cast<std::size_t>(targets[i].w->cols) != k || !same(*kernels[i])) return false;
    return true;
  };
  // The targets from token t0 > 0 on (a copy: rarely taken, passes and rests).
  auto from_token = [&](std::size_t t0) {
    std::vector<MatmulTarget> rest(targets.begin(), targets.end());
    for (MatmulTarget& t : rest) t.y += t0 * t.ldy;
    return rest;
  };
  const std::size_t tiled = first.decode_from(n);
  if (first.quantize && tiled == 0 && all([&](const MatmulKernel& r) {
        return r.activations == first.activations && r.quantize == first.quantize && r.decode_from(n) == 0;
      })) {
    std::size_t pass = n;  // the decode kernels' passes: as many tokens as all take
    for (const MatmulKernel* r : kernels) pass = std::min(pass, r->decode_tokens);
    detail::decode_shared(targets, kernels, x, std::min(pass, n), ldx);
    for (std::size_t t0 = pass; t0 < n; t0 += pass)
      detail::decode_shared(from_token(t0), kernels, x + t0 * ldx, std::min(pass, n - t0), ldx);
    return;
  }
  if (first.pack && tiled > 0 && all([&](const MatmulKernel& r) { return r.pack == first.pack && r.decode_from(n) == tiled; })) {
    const void* packed = first.pack(x, ldx, tiled, k);
    for (std::size_t i = 0; i < targets.size(); ++i)
      kernels[i]->prefill_packed(*targets[i].w, packed, tiled, targets[i].y, targets[i].ldy);
    if (tiled < n) matmul_shared(from_token(tiled), x + tiled * ldx, n - tiled, ldx, isa);
    return;
  }
  for (const MatmulTarget& t : targets) matmul(*t.w, x, n, ldx, t.y, t.ldy, isa);
}

namespace scalar {
// The oracle: Eigen's product over the same memory, in double.
inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                       std::size_t ldy) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> W(w, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(k));
  const Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>> X(x, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k),
                                                              Eigen::OuterStride<>(static_cast<Eigen::Index>(ldx)));
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> Y(y, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(m),
                                                  Eigen::OuterStride<>(static_cast<Eigen::Index>(ldy)));
  Y = (X.cast<double>() * W.cast<double>().transpose()).cast<float>();
}

// Any type: rows dequantised exactly, then the f32 oracle.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  std::vector<float> dense(static_cast<std::size_t>(w.rows * w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r) quant::dequantize_row(w.type, w.row(r), w.cols, dense.data() + r * w.cols);
  matmul_f32(dense.data(), static_cast<std::size_t>(w.rows), static_cast<std::size_t>(w.cols), x, ldx, n, y, ldy);
}
}  // namespace scalar

}  // namespace streamllm::kernels
