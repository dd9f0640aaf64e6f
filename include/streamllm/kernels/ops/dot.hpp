// Dot product: the inner loop of attention scores and of matrix-vector
// products. The body is dot-inl.hpp, compiled per kernel family.
#pragma once

#include <cstddef>

#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels::scalar {
inline float dot(const float* a, const float* b, std::size_t n) {
  float s = 0.f;
  for (std::size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace streamllm::kernels::scalar

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/dot-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

inline float dot(const float* a, const float* b, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(dot(a, b, n)); }

// The active family's transposing reduction (attention's scores) on a
// square block in memory: rows [L][L] -> out[L], L the family's lanes
// (returned; at most kMaxLanes).
inline std::size_t lane_sums(const float* rows, float* out) { STREAMLLM_ON_ACTIVE_ISA(lane_sums(rows, out)); }

}  // namespace streamllm::kernels
