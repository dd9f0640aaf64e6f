// Decode of Q4_1, Q5_0 and Q5_1 rows against int8 activations: blocks of 32
// unsigned quants with a scale and an offset, x = d q + m (Q5_0 stores q - 16,
// so m = -16 d). Per block, d dx (q . xq) + m dx (sum of xq): the integer dot
// product is exact, and the offset needs only the activation block's d x sum,
// which the activations carry (dsum) for Q4_K's mins already.
// These are llama.cpp's older types, and the ones its quantiser falls back to
// for rows the K-quants cannot take (a Q4_K_M file of a model whose rows are
// not a multiple of 256 holds Q5_0), and dequantised to f32 their decode ran
// at a seventh of llama.cpp's speed (docs/kernel-measurements.md).
// Prefill takes the int8 tiles (avx512/ and avx2/int8_tiles.hpp: Q5_0
// unpacked as q - 16, Q4_1 and Q5_1 with m as Q4_K's min). The AVX2 kernels
// are the Row policies of x86_rows.hpp (Q5_0Row, Q4_1Row, Q5_1Row).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

// m of x = d q + m.
inline float block_offset(const quant::BlockQ4_1& b) { return f16_to_f32(b.m); }
inline float block_offset(const quant::BlockQ5_1& b) { return f16_to_f32(b.m); }
inline float block_offset(const quant::BlockQ5_0& b) { return -16.0f * f16_to_f32(b.d); }

// The fifth bits (bit j: element j), or none.
template <class Block>
inline std::uint32_t fifth_bits(const Block& b) {
  if constexpr (std::is_same_v<Block, quant::BlockQ4_1>) {
    return 0;
  } else {
    std::uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    return qh;
  }
}

// Calls f(Block{}) with the block type of t (is_unsigned_blocks).
template <class F>
inline void with_unsigned_block(DType t, F&& f) {
  if (t == DType::Q4_1) return f(quant::BlockQ4_1{});
  if (t == DType::Q5_0) return f(quant::BlockQ5_0{});
  f(quant::BlockQ5_1{});
}

// Block b of a row against token t's activations, in scalar code: d dx
// (q . xq) + m dx (sum of xq).
template <class Block>
inline float unsigned_block_dot(const Block& blk, const QuantizedActivations& xa, std::size_t t, std::size_t b) {
  const std::uint32_t qh = fifth_bits(blk);
  const std::int8_t* xq = xa.q_row(t) + 32 * b;
  std::int32_t dot = 0;
  for (int j = 0; j < 16; ++j) {
    dot += ((blk.qs[j] & 0x0F) | static_cast<int>((qh >> j) & 1) << 4) * xq[j];
    dot += ((blk.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4) * xq[j + 16];
  }
  return f16_to_f32(blk.d) * xa.d_row(t)[b] * static_cast<float>(dot) + block_offset(blk) * xa.dsum_row(t)[b];
}

namespace portable {

// The twin of the AVX-512 kernel below and of the AVX2 Row policies: the
// same integer dot products.
inline void gemv_unsigned_blocks(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                 float* y, std::size_t ldy) {
  const QuantizedActivations& xa = *in.xa;
  with_unsigned_block(w.type, [&](auto tag) {
    using Block = decltype(tag);
    for (std::size_t r = r0; r < r1; ++r) {
      const auto* blocks = reinterpret_cast<const Block*>(w.row(static_cast<std::int64_t>(r)));
      for (std::size_t t = 0; t < n; ++t) {
        float acc = 0;
        for (std::size_t b = 0; b < xa.blocks; ++b) {
          acc += unsigned_block_dot(blocks[b], xa, t, b);
        }
        y[t * ldy + r] = acc;
      }
    }
  });
}

}  // namespace portable

}  // namespace streamllm::kernels
