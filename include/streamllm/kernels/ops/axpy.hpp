// y += a * x and y *= a: the residual stream and the weighted sum of values.
// The bodies are axpy-inl.hpp, compiled per kernel family.
#pragma once

#include <cstddef>

#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels::scalar {
inline void axpy(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
}
inline void scale(float a, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] *= a;
}
}  // namespace streamllm::kernels::scalar

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/axpy-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

inline void axpy(float a, const float* x, float* y, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(axpy(a, x, y, n)); }
inline void scale(float a, float* y, std::size_t n) { STREAMLLM_ON_ACTIVE_ISA(scale(a, y, n)); }
inline void add_inplace(float* y, const float* x, std::size_t n) { axpy(1.0f, x, y, n); }

}  // namespace streamllm::kernels
