// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w.
// The body is rmsnorm-inl.hpp, compiled per kernel family.
#pragma once

#include <cmath>
#include <cstddef>

#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels::scalar {
inline void rmsnorm(float* out, const float* x, const float* w, std::size_t n, float eps) {
  float ss = 0.f;
  for (std::size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (std::size_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}
}  // namespace streamllm::kernels::scalar

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/rmsnorm-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

inline void rmsnorm(float* out, const float* x, const float* w, std::size_t n, float eps) {
  STREAMLLM_ON_ACTIVE_ISA(rmsnorm(out, x, w, n, eps));
}

}  // namespace streamllm::kernels
