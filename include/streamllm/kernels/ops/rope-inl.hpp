// RoPE from its tables over Vec, compiled once per kernel family
// (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

// y = x * cos + swap_pairs(x) * sin, with the signs folded into the table.
inline void rope_apply(float* x, std::size_t n, const float* cosx, const float* sinx, std::size_t table_len) {
  std::size_t e = 0;
  if (table_len % kLanes == 0)
    for (; e + kLanes <= n; e += kLanes) {
      const std::size_t t = e % table_len;
      const Vec v = load(x + e);
      store(x + e, fma(v, load(cosx + t), swap_pairs(v) * load(sinx + t)));
    }
  for (; e + 1 < n; e += 2) {  // tail, and head sizes that do not tile a vector
    const std::size_t t = e % table_len;
    const float c = cosx[t], s = sinx[t + 1];
    const float x0 = x[e], x1 = x[e + 1];
    x[e] = x0 * c - x1 * s;
    x[e + 1] = x0 * s + x1 * c;
  }
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
