// Portable decode of Q2_K and Q3_K rows against int8 activations: the twin
// the vector kernels are tested against (the portable path itself
// dequantises these types). Per block of 16 the integer dot product of its
// quants with the activations' quants, times its scale; Q2_K's min times
// the activations' sum over the block. Scaled per activation block of 32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels::portable {

inline void gemv_low_bit_kquant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                float* y, std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  const std::size_t super_blocks = xa.cols / 256;
  for (std::size_t r = r0; r < r1; ++r) {
    const std::byte* row = w.row(static_cast<std::int64_t>(r));
    for (std::size_t t = 0; t < n; ++t) {
      float acc = 0;
      for (std::size_t sb = 0; sb < super_blocks; ++sb) {
        const std::int8_t* xq = xa.q_row(t) + 256 * sb;
        const float* xd = xa.d_row(t) + 8 * sb;
        if (w.type == DType::Q2_K) {
          const auto& b = reinterpret_cast<const quant::BlockQ2K*>(row)[sb];
          const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
          for (int j = 0; j < 8; ++j) {  // activation block j: Q2_K blocks 2j and 2j + 1
            std::int32_t dot = 0, mins = 0;
            for (int e = 32 * j; e < 32 * j + 32; ++e) {
              const int sc = b.scales[e / 16];
              dot += (sc & 0xF) * quant::low2_bits(b.qs, e) * xq[e];
              mins += (sc >> 4) * xq[e];
            }
            acc += xd[j] * (d * static_cast<float>(dot) - dmin * static_cast<float>(mins));
          }
        } else {
          const auto& b = reinterpret_cast<const quant::BlockQ3K*>(row)[sb];
          int sc[16];
          quant::q3k_scales(b.scales, sc);
          const float d = f16_to_f32(b.d);
          for (int j = 0; j < 8; ++j) {
            std::int32_t dot = 0;
            for (int e = 32 * j; e < 32 * j + 32; ++e) {
              const int q = quant::low2_bits(b.qs, e) + 4 * ((b.hmask[e % 32] >> (e / 32)) & 1) - 4;
              dot += (sc[e / 16] - 32) * q * xq[e];
            }
            acc += xd[j] * d * static_cast<float>(dot);
          }
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace streamllm::kernels::portable
