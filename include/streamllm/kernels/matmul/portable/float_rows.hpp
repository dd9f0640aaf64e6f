// Matrix-vector products with f32 weights: y[j][r] = dot(W[r], x[j]) for a few
// tokens j. Decode reads every weight once per token, so this loop runs at
// memory bandwidth; its only job is to keep enough loads in flight.
#pragma once

#include <cstddef>

#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/ops/simd.hpp"
#include "streamllm/memory.hpp"
#include "streamllm/quant/blocks.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

// Rows one after the other (one sequential stream, which the hardware
// prefetcher follows), each against NT tokens, so each weight vector loaded
// serves every token. Four vectors per step and an accumulator each keep
// enough loads in flight for one stream (a software prefetch adds nothing
// to one stream). On AVX-512 CPUs f32 weights go instead through
// avx512::gemv_widen_rows (up to 16 tokens), which reads four streams at
// once, faster on one core.
template <int NT>
inline void gemv_f32_rows(const float* w, std::size_t ldw, std::size_t k, const float* x, std::size_t ldx, float* y,
                          std::size_t ldy, std::size_t r0, std::size_t r1) {
  constexpr std::size_t kStep = 4 * kLanes;
  const std::size_t kend = k / kStep * kStep, vend = vector_end(k);
  for (std::size_t r = r0; r < r1; ++r) {
    const float* wr = w + r * ldw;
    Batch acc[NT][4];
    for (auto& a : acc)
      for (auto& b : a) b = Batch(0.f);
    std::size_t kk = 0;
    for (; kk < kend; kk += kStep) {
      Batch wv[4];
      for (std::size_t v = 0; v < 4; ++v) wv[v] = load(wr + kk + v * kLanes);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) {
        const float* xj = x + static_cast<std::size_t>(j) * ldx + kk;
        for (std::size_t v = 0; v < 4; ++v) acc[j][v] = xsimd::fma(wv[v], load(xj + v * kLanes), acc[j][v]);
      }
    }
    for (; kk < vend; kk += kLanes) {
      const Batch wv = load(wr + kk);
      for (int j = 0; j < NT; ++j) acc[j][0] = xsimd::fma(wv, load(x + static_cast<std::size_t>(j) * ldx + kk), acc[j][0]);
    }
    for (int j = 0; j < NT; ++j) {
      const float* xj = x + static_cast<std::size_t>(j) * ldx;
      float s = xsimd::hadd((acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]));
      for (std::size_t t = kk; t < k; ++t) s += wr[t] * xj[t];
      y[static_cast<std::size_t>(j) * ldy + r] = s;
    }
  }
}

namespace portable {

// Any type: one row at a time to f32, then a vector dot per token.
inline void gemv_dequant(const TensorView& w, const float* x, std::size_t ldx, std::size_t n, float* y, std::size_t ldy,
                         std::size_t r0, std::size_t r1) {
  static thread_local AlignedVector<float> row;
  const auto k = static_cast<std::size_t>(w.cols);
  float* buf = grow(row, k);
  for (std::size_t r = r0; r < r1; ++r) {
    quant::dequantize_row(w.type, w.row(static_cast<std::int64_t>(r)), w.cols, buf);
    for (std::size_t t = 0; t < n; ++t) y[t * ldy + r] = dot(buf, x + t * ldx, k);
  }
}

}  // namespace portable

}  // namespace streamllm::kernels
