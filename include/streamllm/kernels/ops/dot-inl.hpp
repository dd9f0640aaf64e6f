// dot over Vec, compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

// Four accumulators: an FMA has a latency of four cycles, so one chain would
// leave the FMA units idle three cycles out of four.
inline float dot(const float* a, const float* b, std::size_t n) {
  Vec acc0(0.f), acc1(0.f), acc2(0.f), acc3(0.f);
  std::size_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    acc0 = fma(load(a + i), load(b + i), acc0);
    acc1 = fma(load(a + i + kLanes), load(b + i + kLanes), acc1);
    acc2 = fma(load(a + i + 2 * kLanes), load(b + i + 2 * kLanes), acc2);
    acc3 = fma(load(a + i + 3 * kLanes), load(b + i + 3 * kLanes), acc3);
  }
  for (const std::size_t end = vector_end(n); i < end; i += kLanes) acc0 = fma(load(a + i), load(b + i), acc0);
  float s = hadd((acc0 + acc1) + (acc2 + acc3));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Lane sums of a square block of kLanes rows of kLanes floats (sum_each, in
// memory): out[i] is the sum of row i, in hadd's order. Returns kLanes.
inline std::size_t lane_sums(const float* rows, float* out) {
  Vec r[kLanes];
  for (std::size_t i = 0; i < kLanes; ++i) r[i] = load(rows + i * kLanes);
  store(out, sum_each(r));
  return kLanes;
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
