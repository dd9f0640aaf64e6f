// The SwiGLU gate over Vec, compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

inline void silu_gate(float* gate, const float* up, std::size_t n) {
  const Vec one(1.0f);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) {
    const Vec g = load(gate + i);
    store(gate + i, g / (one + exp(-g)) * load(up + i));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
