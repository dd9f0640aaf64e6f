// axpy, scale over Vec, compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

inline void axpy(float a, const float* x, float* y, std::size_t n) {
  const Vec va(a);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(y + i, fma(va, load(x + i), load(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

inline void scale(float a, float* y, std::size_t n) {
  const Vec va(a);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(y + i, va * load(y + i));
  for (; i < n; ++i) y[i] *= a;
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
