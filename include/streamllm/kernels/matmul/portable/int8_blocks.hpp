// Portable decode of Q8_0 and Q4_0 rows against int8 activations: the path
// of a CPU without AVX2, and the twin the vector kernels are tested against.
// y[t][r] = dot(W[r], x[t]) for a few tokens t, rows [r0, r1).
#pragma once

#include <cstddef>
#include <cstdint>

#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels::portable {

// Q8_0 weights x Q8 activations: sum over blocks of dw * dx * <qw, qx>, the
// integer part exact.
inline void gemv_q8_0(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                      std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  for (std::size_t r = r0; r < r1; ++r) {
    const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(w.row(static_cast<std::int64_t>(r)));
    for (std::size_t t = 0; t < n; ++t) {
      const std::int8_t* xq = xa.q_row(t);
      const float* xd = xa.d_row(t);
      float acc = 0;
      for (std::size_t b = 0; b < xa.blocks; ++b) {
        std::int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += blocks[b].qs[j] * xq[b * 32 + static_cast<std::size_t>(j)];
        acc += f16_to_f32(blocks[b].d) * xd[b] * static_cast<float>(s);
      }
      y[t * ldy + r] = acc;
    }
  }
}

// Q4_0 weights x Q8 activations.
inline void gemv_q4_0(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                      std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  for (std::size_t r = r0; r < r1; ++r) {
    const auto* blocks = reinterpret_cast<const quant::BlockQ4_0*>(w.row(static_cast<std::int64_t>(r)));
    for (std::size_t t = 0; t < n; ++t) {
      const std::int8_t* xq = xa.q_row(t);
      const float* xd = xa.d_row(t);
      float acc = 0;
      for (std::size_t b = 0; b < xa.blocks; ++b) {
        std::int32_t s = 0;
        for (int j = 0; j < 16; ++j) {
          s += ((blocks[b].qs[j] & 0x0F) - 8) * xq[b * 32 + static_cast<std::size_t>(j)];
          s += ((blocks[b].qs[j] >> 4) - 8) * xq[b * 32 + 16 + static_cast<std::size_t>(j)];
        }
        acc += f16_to_f32(blocks[b].d) * xd[b] * static_cast<float>(s);
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace streamllm::kernels::portable
