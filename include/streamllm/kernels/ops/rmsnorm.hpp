// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w.
#pragma once

#include <cmath>
#include <cstddef>

#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/ops/simd.hpp"

namespace streamllm::kernels {

namespace scalar {
inline void rmsnorm(float* out, const float* x, const float* w, std::size_t n, float eps) {
  float ss = 0.f;
  for (std::size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}
}  // namespace scalar

inline void rmsnorm(float* out, const float* x, const float* w, std::size_t n, float eps) {
  const float inv = 1.0f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  const Batch vinv(inv);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(out + i, load(x + i) * vinv * load(w + i));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

}  // namespace streamllm::kernels
