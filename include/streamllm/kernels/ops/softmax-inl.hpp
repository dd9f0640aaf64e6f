// Softmax over Vec, compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

inline float max_of(const float* x, std::size_t n) {
  float m = -std::numeric_limits<float>::infinity();
  std::size_t i = 0;
  if (n >= kLanes) {
    Vec vm = load(x);
    for (i = kLanes; i + kLanes <= n; i += kLanes) vm = max(vm, load(x + i));
    alignas(64) float lanes[kLanes];
    vm.store_aligned(lanes);
    for (float v : lanes) m = std::max(m, v);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline float exp_shifted(float* x, std::size_t n, float shift) {
  const Vec vshift(shift);
  Vec vsum(0.f);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) {
    const Vec e = exp(load(x + i) - vshift);
    store(x + i, e);
    vsum += e;
  }
  float sum = hadd(vsum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline void softmax(float* x, std::size_t n) {
  if (n == 0) return;
  const float inv = 1.0f / exp_shifted(x, n, max_of(x, n));
  const Vec vinv(inv);
  std::size_t i = 0;
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) store(x + i, load(x + i) * vinv);
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
