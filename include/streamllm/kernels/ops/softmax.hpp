// Softmax in place, shifted by the maximum so that exp never overflows.
// The bodies are softmax-inl.hpp, compiled per kernel family.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels::scalar {
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
}  // namespace streamllm::kernels::scalar

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/softmax-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

inline float max_of(const float* x, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(max_of(x, n)); }
inline float exp_shifted(float* x, std::size_t n, float shift) { STREAMLLM_ON_ACTIVE_ISA(exp_shifted(x, n, shift)); }
inline void softmax(float* x, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(softmax(x, n)); }

}  // namespace streamllm::kernels
