// Matrix-vector products with f32 weights over Vec, compiled once per kernel
// family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

// Rows one after the other (one sequential stream, which the hardware
// prefetcher follows), each against NT tokens, so each weight vector loaded
// serves every token. Four vectors per step and an accumulator each keep
// enough loads in flight for one stream (a software prefetch adds nothing
// to one stream). (The AVX-512 rows read f32 weights with
// avx512::gemv_widen_rows instead: four streams at once, faster on one core.)
template <int NT>
inline void gemv_f32_rows(const float* w, std::size_t ldw, std::size_t k, const float* x, std::size_t ldx, float* y,
                          std::size_t ldy, std::size_t r0, std::size_t r1) {
  constexpr std::size_t kStep = 4 * kLanes;
  const std::size_t kend = k / kStep * kStep, vend = vector_end(k);
  for (std::size_t r = r0; r < r1; ++r) {
    const float* wr = w + r * ldw;
    Vec acc[NT][4];
    for (auto& a : acc)
      for (auto& b : a) b = Vec(0.f);
    std::size_t kk = 0;
    for (; kk < kend; kk += kStep) {
      Vec wv[4];
      for (std::size_t v = 0; v < 4; ++v) wv[v] = load(wr + kk + v * kLanes);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) {
        const float* xj = x + static_cast<std::size_t>(j) * ldx + kk;
        for (std::size_t v = 0; v < 4; ++v) acc[j][v] = fma(wv[v], load(xj + v * kLanes), acc[j][v]);
      }
    }
    for (; kk < vend; kk += kLanes) {
      const Vec wv = load(wr + kk);
      for (int j = 0; j < NT; ++j) acc[j][0] = fma(wv, load(x + static_cast<std::size_t>(j) * ldx + kk), acc[j][0]);
    }
    for (int j = 0; j < NT; ++j) {
      const float* xj = x + static_cast<std::size_t>(j) * ldx;
      float s = hadd((acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]));
      for (std::size_t t = kk; t < k; ++t) s += wr[t] * xj[t];
      y[static_cast<std::size_t>(j) * ldy + r] = s;
    }
  }
}

// The F32 rows' decode kernel (a DecodeRowsFn): any n tokens in passes of up to kMaxGemvTokens.
inline void gemv_f32(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                     std::size_t ldy) {
  const auto k = static_cast<std::size_t>(w.cols);
  const auto* rows = reinterpret_cast<const float*>(w.data);
  in_token_passes(
      n, [&]<int NT>(std::size_t t0) { gemv_f32_rows<NT>(rows, k, k, in.x + t0 * in.ldx, in.ldx, y + t0 * ldy, ldy, r0, r1); });
}

}  // namespace streamllm::kernels::STREAMLLM_ISA
