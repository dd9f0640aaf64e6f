// The portable rows of any type: each row dequantised to f32, then a dot per
// token (the f32 rows themselves: f32_rows.hpp).
#pragma once

#include <cstddef>

#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/f32_rows.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

namespace portable {

// Any type: one row at a time to f32, then a vector dot per token.
inline void gemv_dequant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                         std::size_t ldy) {
  static thread_local AlignedVector<float> row;
  const auto k = static_cast<std::size_t>(w.cols);
  float* buf = grow(row, k);
  for (std::size_t r = r0; r < r1; ++r) {
    quant::dequantize_row(w.type, w.row(static_cast<std::int64_t>(r)), w.cols, buf);
    for (std::size_t t = 0; t < n; ++t) y[t * ldy + r] = portable::dot(buf, in.x + t * in.ldx, k);
  }
}

}  // namespace portable

}  // namespace streamllm::kernels
