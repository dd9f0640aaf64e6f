// Activations quantised to int8 blocks of 32 (scale d = max|x| / 127), with
// the sum of each block's quants: the integer kernels multiply them with
// int8 / 4-bit weights, and the sums correct for weights stored unsigned.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "streamllm/memory.hpp"

namespace streamllm::kernels {

struct QuantizedActivations {
  std::size_t rows = 0, cols = 0, blocks = 0;  // blocks per row = cols / 32
  AlignedVector<std::int8_t> q;    // [rows][cols]
  AlignedVector<float> d;          // [rows][blocks]
  AlignedVector<std::int32_t> sum; // [rows][blocks]: sum of the block's quants

  const std::int8_t* q_row(std::size_t r) const { return q.data() + r * cols; }
  const float* d_row(std::size_t r) const { return d.data() + r * blocks; }
  const std::int32_t* sum_row(std::size_t r) const { return sum.data() + r * blocks; }
};

// x[rows][ldx] (cols used, a multiple of 32) -> out.
inline void quantize_activations(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols,
                                 QuantizedActivations& out) {
  out.rows = rows;
  out.cols = cols;
  out.blocks = cols / 32;
  grow(out.q, rows * cols);
  grow(out.d, rows * out.blocks);
  grow(out.sum, rows * out.blocks);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    for (std::size_t b = 0; b < out.blocks; ++b) {
      const float* v = xr + b * 32;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(v[j]));
      const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
      std::int8_t* q = out.q.data() + r * cols + b * 32;
      std::int32_t s = 0;
      for (int j = 0; j < 32; ++j) {
        q[j] = static_cast<std::int8_t>(std::lrint(v[j] * id));
        s += q[j];
      }
      out.d[r * out.blocks + b] = d;
      out.sum[r * out.blocks + b] = s;
    }
  }
}

}  // namespace streamllm::kernels
