// Portable decode of K-quant rows (Q4_K, Q5_K, Q6_K) against int8
// activations: the twin the AVX2 and AVX-512 kernels are tested against.
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

// One Q4_K / Q5_K super-block's unsigned quants q against its 256
// activations: per sub-block of 32 the integer dot product scaled by d sc
// dx, less dmin m dx times the activation block's sum.
template <class Block>
inline float affine_k_dot(const Block& b, const std::uint8_t* q, const std::int8_t* xq, const float* xd,
                          const std::int32_t* sums) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  float acc = 0;
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc, m;
    quant::q4k_scale_min(j, b.scales, sc, m);
    std::int32_t dot = 0;
    for (int e = 32 * j; e < 32 * j + 32; ++e) dot += q[e] * xq[e];
    acc += d * sc * xd[j] * static_cast<float>(dot) - dmin * m * xd[j] * static_cast<float>(sums[j]);
  }
  return acc;
}

// K-quant weights x Q8 activations: per sub-block an integer dot product
// of the unsigned quants, scaled by d sc dx; less, for Q4_K and Q5_K, dmin m
// dx times the activation block's sum, and for Q6_K the offset 32 times the
// sub-block's activations. The twin of the VNNI kernel (gemv_kquant_int8_row).
inline void gemv_kquant_int8(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                             std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  const std::size_t super_blocks = xa.cols / 256;
  std::uint8_t q[256];
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t t = 0; t < n; ++t) {
      float acc = 0;
      for (std::size_t sb = 0; sb < super_blocks; ++sb) {
        const std::int8_t* xq = xa.q_row(t) + 256 * sb;
        const float* xd = xa.d_row(t) + 8 * sb;
        if (w.type == DType::Q4_K) {
          const auto& b = reinterpret_cast<const quant::BlockQ4K*>(w.row(static_cast<std::int64_t>(r)))[sb];
          for (int c = 0; c < 4; ++c)
            for (int i = 0; i < 32; ++i) {
              q[64 * c + i] = b.qs[32 * c + i] & 0x0F;
              q[64 * c + 32 + i] = b.qs[32 * c + i] >> 4;
            }
          acc += affine_k_dot(b, q, xq, xd, xa.sum_row(t) + 8 * sb);
        } else if (w.type == DType::Q5_K) {
          const auto& b = reinterpret_cast<const quant::BlockQ5K*>(w.row(static_cast<std::int64_t>(r)))[sb];
          for (int c = 0; c < 4; ++c)
            for (int i = 0; i < 32; ++i) {
              q[64 * c + i] = static_cast<std::uint8_t>((b.qs[32 * c + i] & 0x0F) | ((b.qh[i] >> (2 * c)) & 1) << 4);
              q[64 * c + 32 + i] = static_cast<std::uint8_t>((b.qs[32 * c + i] >> 4) | ((b.qh[i] >> (2 * c + 1)) & 1) << 4);
            }
          acc += affine_k_dot(b, q, xq, xd, xa.sum_row(t) + 8 * sb);
        } else {
          const auto& b = reinterpret_cast<const quant::BlockQ6K*>(w.row(static_cast<std::int64_t>(r)))[sb];
          for (int h = 0; h < 2; ++h)
            for (int i = 0; i < 32; ++i) {
              const std::uint8_t* ql = b.ql + 64 * h;
              const std::uint8_t qh = b.qh[32 * h + i];
              q[128 * h + i] = static_cast<std::uint8_t>((ql[i] & 0x0F) | ((qh & 3) << 4));
              q[128 * h + 32 + i] = static_cast<std::uint8_t>((ql[32 + i] & 0x0F) | (((qh >> 2) & 3) << 4));
              q[128 * h + 64 + i] = static_cast<std::uint8_t>((ql[i] >> 4) | (((qh >> 4) & 3) << 4));
              q[128 * h + 96 + i] = static_cast<std::uint8_t>((ql[32 + i] >> 4) | (((qh >> 6) & 3) << 4));
            }
          const float d = f16_to_f32(b.d);
          for (int s = 0; s < 16; ++s) {
            std::int32_t dot = 0;
            for (int e = 16 * s; e < 16 * s + 16; ++e) dot += (q[e] - 32) * xq[e];
            acc += d * b.scales[s] * xd[s / 2] * static_cast<float>(dot);
          }
        }
      }
      y[t * ldy + r] = acc;
    }
}

}  // namespace streamllm::kernels::portable
