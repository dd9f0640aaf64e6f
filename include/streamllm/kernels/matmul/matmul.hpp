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

#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/gemm.hpp"
#include "streamllm/kernels/matmul/kernel_table.hpp"
#include "streamllm/kernels/runtime/threading.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

// One product of matmul_shared: y[n][ldy] = x W^T.
struct MatmulTarget {
  const TensorView* w;
  float* y;
  std::size_t ldy;
};

namespace detail {
// n tokens as the decode kernels read them, in passes of `pass`: each
// pass's tokens quantised where the kernels read int8, in a buffer of the
// calling thread's per pass (all passes run in one parallel loop; the
// workers are handed the pointers).
inline std::span<const DecodeInput> decode_inputs(const MatmulKernel& kernel, const float* x, std::size_t n, std::size_t ldx,
                                                  std::size_t k, std::size_t pass) {
  static thread_local std::vector<QuantizedActivations> quantized;
  static thread_local std::vector<DecodeInput> inputs;
  const std::size_t passes = (n + pass - 1) / pass;
  if (quantized.size() < passes) quantized.resize(passes);
  inputs.clear();
  for (std::size_t p = 0; p < passes; ++p) {
    const float* xt = x + p * pass * ldx;
    if (kernel.quantize) kernel.quantize(xt, ldx, std::min(pass, n - p * pass), k, quantized[p]);
    inputs.push_back({xt, ldx, kernel.quantize ? &quantized[p] : nullptr});
  }
  return inputs;
}

// Several matrices against the same n tokens (one, or wq, wk and wv whose
// kernels read the tokens alike): the first `tiled` tokens on the tiles,
// the rest on the decode kernels in passes of `pass`. The rows of all the
// matrices are chunks of one parallel loop, which runs the tiles and every
// pass of a chunk in turn: the weights come from memory once, and the later
// passes (a chat turn of 38 tokens: 32 on the tiles, 6 on the decode
// kernel; or 20 on the decode kernel in passes of 16 and 4) read them from
// L2. One fork-join for all, and the small matrices' chunks fill the
// threads' tails.
inline void matmul_in_row_chunks(std::span<const MatmulTarget> targets, std::span<const MatmulKernel* const> kernels,
                                 const float* x, std::size_t n, std::size_t ldx, std::size_t tiled, std::size_t pass) {
  const MatmulKernel& first = *kernels[0];
  const auto k = static_cast<std::size_t>(targets[0].w->cols);
  const void* packed = tiled > 0 ? first.pack(x, ldx, tiled, k) : nullptr;
  const std::span<const DecodeInput> passes =
      tiled < n ? decode_inputs(first, x + tiled * ldx, n - tiled, ldx, k, pass) : std::span<const DecodeInput>{};
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
    const std::size_t rows = tiled > 0
                                 ? kernels[i]->tile_chunk_rows
                                 : gemv_chunk_rows(static_cast<std::size_t>(targets[i].w->row_stride), m, std::min(pass, n));
    for (std::size_t r0 = 0; r0 < m; r0 += rows) chunks.push_back({&targets[i], kernels[i], r0, std::min(m, r0 + rows)});
    work += m * k * n;
  }
  const Chunk* list = chunks.data();  // the workers must not read their own thread_local
  parallel_chunks(chunks.size(), 1, work, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c) {
      const Chunk& ch = list[c];
      const MatmulTarget& t = *ch.target;
      if (tiled > 0)
        ch.kernel->prefill_packed(t.w->row_range(static_cast<std::int64_t>(ch.r0), static_cast<std::int64_t>(ch.r1)), packed,
                                  tiled, t.y + ch.r0, t.ldy);
      for (std::size_t p = 0; p < passes.size(); ++p) {
        const std::size_t t0 = tiled + p * pass;
        ch.kernel->decode(*t.w, ch.r0, ch.r1, passes[p], std::min(pass, n - t0), t.y + t0 * t.ldy, t.ldy);
      }
    }
  });
}

// The targets' kernels (the rows of their types) over n tokens, if
// matmul_in_row_chunks can run them together: the same split of the tokens,
// tiles (of any format) that read the same packing of them, decode kernels
// that read them alike; returns the decode kernels' pass, else 0.
inline std::size_t row_chunks_pass(std::span<const MatmulTarget> targets, std::span<const MatmulKernel* const> kernels,
                                   std::size_t n) {
  const MatmulKernel& first = *kernels[0];
  const std::size_t tiled = first.decode_from(n);
  std::size_t pass = n;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const MatmulKernel& r = *kernels[i];
    const bool same_tiles = tiled == 0 || (r.pack && r.prefill_packed && r.pack == first.pack);
    const bool same_rest = tiled == n || (r.activations == first.activations && r.quantize == first.quantize);
    if (targets[i].w->cols != targets[0].w->cols || r.decode_from(n) != tiled || !same_tiles || !same_rest) return 0;
    pass = std::min(pass, r.decode_tokens);
  }
  return pass;
}
}  // namespace detail

// y[n][ldy] = x[n][ldx] * W^T, for the first W.rows outputs of each row of y.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy,
                   Isa isa = active_isa()) {
  if (n == 0) return;
  const MatmulKernel& kernel = matmul_kernel(w.type, isa);
  const std::size_t tiled = kernel.decode_from(n);
  if (tiled > 0 && (!kernel.pack || !kernel.prefill_packed)) {  // tiles of their own (bf16, f32), then the rest
    kernel.prefill(w, x, tiled, ldx, y, ldy);
    if (tiled == n) return;
    return matmul(w, x + tiled * ldx, n - tiled, ldx, y + tiled * ldy, ldy, isa);
  }
  const MatmulTarget target[] = {{&w, y, ldy}};
  const MatmulKernel* const kernels[] = {&kernel};
  detail::matmul_in_row_chunks(target, kernels, x, n, ldx, tiled, kernel.decode_tokens);
}

// Several matrices against the same activations (wq, wk, wv; w_gate, w_up).
// Where their kernels read the tokens alike (Q4_K with Q6_K, as a Q4_K_M
// file mixes them: the same int8 layout at the same limit, the same packing
// for the tiles), the tokens are quantised and packed once for all, and all
// run in one parallel loop (detail::matmul_in_row_chunks). Otherwise one
// matmul per target.
inline void matmul_shared(std::span<const MatmulTarget> targets, const float* x, std::size_t n, std::size_t ldx,
                          Isa isa = active_isa()) {
  if (n == 0 || targets.empty()) return;
  static thread_local std::vector<const MatmulKernel*> kernels;
  kernels.clear();
  for (const MatmulTarget& t : targets) kernels.push_back(&matmul_kernel(t.w->type, isa));
  if (const std::size_t pass = detail::row_chunks_pass(targets, kernels, n); pass > 0)
    return detail::matmul_in_row_chunks(targets, kernels, x, n, ldx, kernels[0]->decode_from(n), pass);
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
