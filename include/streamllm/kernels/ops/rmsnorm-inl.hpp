// RMSNorm over Vec, compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

inline void rmsnorm(float* out, const float* x, const float* w, std::size_t n, float eps) {
  const float inv = 1.0f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  const Vec vinv(inv);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(out + i, load(x + i) * vinv * load(w + i));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
