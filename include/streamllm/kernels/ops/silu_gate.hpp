// SwiGLU's gate (Shazeer 2020): gate[i] = silu(gate[i]) * up[i],
// with silu(x) = x * sigmoid(x) = x / (1 + exp(-x)).
// The body is silu_gate-inl.hpp, compiled per kernel family.
#pragma once

#include <cmath>
#include <cstddef>

#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels::scalar {
inline void silu_gate(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
}  // namespace streamllm::kernels::scalar

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/silu_gate-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

inline void silu_gate(float* gate, const float* up, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(silu_gate(gate, up, n)); }

}  // namespace streamllm::kernels
