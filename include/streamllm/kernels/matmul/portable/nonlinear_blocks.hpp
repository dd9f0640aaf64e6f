// Portable decode of IQ4_NL and IQ4_XS rows against int8 activations: the
// twin the vector kernels are tested against (the portable path itself
// dequantises these types). Per block of 32 the integer dot product of the
// levels with the activations' quants, scaled by the block's scale and the
// activation block's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels::portable {

// 16 bytes of level indices (IQ4_NL's order) against 32 int8 activations.
inline std::int32_t iq4_dot32(const std::uint8_t* qs, const std::int8_t* xq) {
  std::int32_t s = 0;
  for (int j = 0; j < 16; ++j) {
    s += quant::kIq4Levels[qs[j] & 0xF] * xq[j];
    s += quant::kIq4Levels[qs[j] >> 4] * xq[j + 16];
  }
  return s;
}

inline void gemv_iq4(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                     std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  for (std::size_t r = r0; r < r1; ++r) {
    const std::byte* row = w.row(static_cast<std::int64_t>(r));
    for (std::size_t t = 0; t < n; ++t) {
      const std::int8_t* xq = xa.q_row(t);
      const float* xd = xa.d_row(t);
      float acc = 0;
      for (std::size_t b = 0; b < xa.blocks; ++b) {
        float scale;
        const std::uint8_t* qs;
        if (w.type == DType::IQ4_NL) {
          const auto& blk = reinterpret_cast<const quant::BlockIQ4NL*>(row)[b];
          scale = f16_to_f32(blk.d);
          qs = blk.qs;
        } else {
          const auto& sb = reinterpret_cast<const quant::BlockIQ4XS*>(row)[b / 8];
          const int s = static_cast<int>(b % 8);
          scale = f16_to_f32(sb.d) * static_cast<float>(quant::iq4xs_scale(sb, s) - 32);
          qs = sb.qs + 16 * s;
        }
        acc += scale * xd[b] * static_cast<float>(iq4_dot32(qs, xq + 32 * b));
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace streamllm::kernels::portable
