// Matrix-vector products with f32 weights: y[j][r] = dot(W[r], x[j]) for a few
// tokens j. Decode reads every weight once per token, so this loop runs at
// memory bandwidth; its only job is to keep enough loads in flight.
#pragma once

#include <cstddef>

#include "streamllm/kernels/simd.hpp"

namespace streamllm::kernels {

// Four rows at a time against NT tokens: each weight vector loaded once is
// used NT times, and the 4 x NT accumulators hide the FMA latency.
template <int NT>
inline void gemv_f32_rows(const float* w, std::size_t ldw, std::size_t k, const float* x,
                          std::size_t ldx, float* y, std::size_t ldy, std::size_t r0,
                          std::size_t r1) {
  constexpr int R = 4;
  const std::size_t full = r0 + (r1 - r0) / R * R;  // rows in whole groups of R
  for (std::size_t r = r0; r < full; r += R) {
    Batch acc[R][NT];
    for (auto& a : acc)
      for (auto& b : a) b = Batch(0.f);
    const float* wr = w + r * ldw;
    const std::size_t kend = vector_end(k);
    std::size_t kk = 0;
    for (; kk < kend; kk += kLanes) {
      Batch xv[NT];
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) xv[j] = load(x + static_cast<std::size_t>(j) * ldx + kk);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const Batch wv = load(wr + static_cast<std::size_t>(i) * ldw + kk);
#pragma GCC unroll 4
        for (int j = 0; j < NT; ++j) acc[i][j] = xsimd::fma(wv, xv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < NT; ++j) {
        float s = xsimd::hadd(acc[i][j]);
        const float* wi = wr + static_cast<std::size_t>(i) * ldw;
        const float* xj = x + static_cast<std::size_t>(j) * ldx;
        for (std::size_t t = kk; t < k; ++t) s += wi[t] * xj[t];
        y[static_cast<std::size_t>(j) * ldy + r + static_cast<std::size_t>(i)] = s;
      }
  }
  for (std::size_t r = full; r < r1; ++r) {  // leftover rows, one at a time
    const float* wr = w + r * ldw;
    for (int j = 0; j < NT; ++j) {
      const float* xj = x + static_cast<std::size_t>(j) * ldx;
      Batch acc(0.f);
      std::size_t kk = 0;
      for (const std::size_t kend = vector_end(k); kk < kend; kk += kLanes) acc = xsimd::fma(load(wr + kk), load(xj + kk), acc);
      float s = xsimd::hadd(acc);
      for (; kk < k; ++kk) s += wr[kk] * xj[kk];
      y[static_cast<std::size_t>(j) * ldy + r] = s;
    }
  }
}

}  // namespace streamllm::kernels
