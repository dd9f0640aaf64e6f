// Dot product: the inner loop of attention scores and of matrix-vector products.
#pragma once

#include <cstddef>

#include "streamllm/kernels/ops/simd.hpp"

namespace streamllm::kernels {

namespace scalar {
inline float dot(const float* a, const float* b, std::size_t n) {
  float s = 0.f;
  for (std::size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace scalar

// Four accumulators: an FMA has a latency of four cycles, so one chain would
// leave the FMA units idle three cycles out of four.
inline float dot(const float* a, const float* b, std::size_t n) {
  Batch acc0(0.f), acc1(0.f), acc2(0.f), acc3(0.f);
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    acc0 = xsimd::fma(load(a + i), load(b + i), acc0);
    acc1 = xsimd::fma(load(a + i + kLanes), load(b + i + kLanes), acc1);
    acc2 = xsimd::fma(load(a + i + 2 * kLanes), load(b + i + 2 * kLanes), acc2);
    acc3 = xsimd::fma(load(a + i + 3 * kLanes), load(b + i + 3 * kLanes), acc3);
  }
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) acc0 = xsimd::fma(load(a + i), load(b + i), acc0);
  float s = xsimd::hadd((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace streamllm::kernels
