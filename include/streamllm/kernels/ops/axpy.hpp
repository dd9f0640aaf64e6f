// y += a * x and y += x: the residual stream and the weighted sum of values.
#pragma once

#include <cstddef>

#include "streamllm/kernels/ops/simd.hpp"

namespace streamllm::kernels {

namespace scalar {
inline void axpy(float a, const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
}
inline void scale(float a, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] *= a;
}
}  // namespace scalar

inline void axpy(float a, const float* x, float* y, std::size_t n) {
  const Batch va(a);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(y + i, xsimd::fma(va, load(x + i), load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

inline void scale(float a, float* y, std::size_t n) {
  const Batch va(a);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(y + i, va * load(y + i));
  for (; i < n; ++i) y[i] *= a;
}

inline void add_inplace(float* y, const float* x, std::size_t n) { axpy(1.0f, x, y, n); }

}  // namespace streamllm::kernels
