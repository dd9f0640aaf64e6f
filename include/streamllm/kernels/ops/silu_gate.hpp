// SwiGLU's gate (Shazeer 2020): gate[i] = silu(gate[i]) * up[i],
// with silu(x) = x * sigmoid(x) = x / (1 + exp(-x)).
#pragma once

#include <cmath>
#include <cstddef>

#include "streamllm/kernels/ops/simd.hpp"

namespace streamllm::kernels {

namespace scalar {
inline void silu_gate(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
}  // namespace scalar

inline void silu_gate(float* gate, const float* up, std::size_t n) {
  const Batch one(1.0f);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) {
    const Batch g = load(gate + i);
    store(gate + i, g / (one + xsimd::exp(-g)) * load(up + i));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace streamllm::kernels
