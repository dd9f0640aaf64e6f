// Matrix-vector products with f32 weights: y[j][r] = dot(W[r], x[j]) for a few
// tokens j. Decode reads every weight once per token, so this loop runs at
// memory bandwidth; its only job is to keep enough loads in flight.
#pragma once

#include <cstddef>

#include "streamllm/kernels/simd.hpp"

namespace streamllm::kernels {

// How far ahead of the loads the prefetches run: about the bytes that must be
// in flight to cover DRAM latency at full bandwidth on one core.
inline constexpr std::size_t kGemvPrefetchBytes = 2048;

// Rows one after the other (one sequential stream, which the hardware
// prefetcher follows; software prefetch covers the start of each next row),
// each against NT tokens, so each weight vector loaded serves every token.
// Two accumulators per token hide the FMA latency.
template <int NT>
inline void gemv_f32_rows(const float* w, std::size_t ldw, std::size_t k, const float* x, std::size_t ldx, float* y,
                          std::size_t ldy, std::size_t r0, std::size_t r1) {
  const std::size_t kend = k / (2 * kLanes) * (2 * kLanes);
  for (std::size_t r = r0; r < r1; ++r) {
    const float* wr = w + r * ldw;
    Batch acc0[NT], acc1[NT];
    for (int j = 0; j < NT; ++j) acc0[j] = acc1[j] = Batch(0.f);
    std::size_t kk = 0;
    for (; kk < kend; kk += 2 * kLanes) {
      if (kk % 32 == 0) __builtin_prefetch(reinterpret_cast<const char*>(wr + kk) + kGemvPrefetchBytes);
      const Batch w0 = load(wr + kk), w1 = load(wr + kk + kLanes);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) {
        const float* xj = x + static_cast<std::size_t>(j) * ldx + kk;
        acc0[j] = xsimd::fma(w0, load(xj), acc0[j]);
        acc1[j] = xsimd::fma(w1, load(xj + kLanes), acc1[j]);
      }
    }
    for (int j = 0; j < NT; ++j) {
      const float* xj = x + static_cast<std::size_t>(j) * ldx;
      float s = xsimd::hadd(acc0[j] + acc1[j]);
      for (std::size_t t = kk; t < k; ++t) s += wr[t] * xj[t];
      y[static_cast<std::size_t>(j) * ldy + r] = s;
    }
  }
}

}  // namespace streamllm::kernels
