// Softmax in place, shifted by the maximum so that exp never overflows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "streamllm/kernels/ops/simd.hpp"

namespace streamllm::kernels {

namespace scalar {
inline float max_of(const float* x, std::size_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = exp(x[i] - shift); returns the sum of the new values.
inline float exp_shifted(float* x, std::size_t n, float shift) {
  float sum = 0.f;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  const float sum = exp_shifted(x, n, max_of(x, n));
  for (std::size_t i = 0; i < n; ++i) x[i] /= sum;
}
}  // namespace scalar

inline float max_of(const float* x, std::size_t n) {
  float m = -std::numeric_limits<float>::infinity();
  std::size_t i = 0;
  if (n >= kLanes) {
    Batch vm = load(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) vm = xsimd::max(vm, load(x + i));
    alignas(64) float lanes[kLanes];
    vm.store_aligned(lanes);
    for (float v : lanes) m = std::max(m, v);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline float exp_shifted(float* x, std::size_t n, float shift) {
  const Batch vshift(shift);
  Batch vsum(0.f);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) {
    const Batch e = xsimd::exp(load(x + i) - vshift);
    store(x + i, e);
    vsum += e;
  }
  float sum = xsimd::hadd(vsum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  const float inv = 1.0f / exp_shifted(x, n, max_of(x, n));
  const Batch vinv(inv);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(x + i, load(x + i) * vinv);
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace streamllm::kernels
