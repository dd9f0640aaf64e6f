// The portable rows of the kernel table (kernel.hpp): the kernels every CPU
// runs (xsimd, compiled for the build's baseline), and the fallback of every
// other ISA for the types it does not accelerate. F32 rows are read in
// place, Q8_0 and Q4_0 against int8 activations, every other type
// dequantised a row at a time (kAnyTypeRow). Prefill: the f32 tiles over rows
// converted to f32.
#pragma once

#include <cstddef>
#include <span>

#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/matmul/portable/float_rows.hpp"
#include "streamllm/kernels/matmul/portable/int8_blocks.hpp"
#include "streamllm/kernels/matmul/portable/kquants.hpp"
#include "streamllm/kernels/matmul/portable/low_bit_kquants.hpp"
#include "streamllm/kernels/matmul/portable/nonlinear_blocks.hpp"
#include "streamllm/kernels/matmul/portable/unsigned_blocks.hpp"

namespace streamllm::kernels::portable {

inline void decode_f32(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                       std::size_t ldy) {
  const auto k = static_cast<std::size_t>(w.cols);
  const auto* rows = reinterpret_cast<const float*>(w.data);
  in_token_passes(
      n, [&]<int NT>(std::size_t t0) { gemv_f32_rows<NT>(rows, k, k, in.x + t0 * in.ldx, in.ldx, y + t0 * ldy, ldy, r0, r1); });
}

inline void decode_any(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                       std::size_t ldy) {
  gemv_dequant(w, in.x, in.ldx, n, y, ldy, r0, r1);
}

inline void decode_q8_0(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                        std::size_t ldy) {
  gemv_q8_0(w, *in.xa, n, y, ldy, r0, r1);
}

inline void decode_q4_0(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                        std::size_t ldy) {
  gemv_q4_0(w, *in.xa, n, y, ldy, r0, r1);
}

// Twins of the vector kernels, not rows of their own: the portable path
// dequantises these types (faster in scalar code than their integer arithmetic).
inline void decode_kquant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                          std::size_t ldy) {
  gemv_kquant_int8(w, *in.xa, n, y, ldy, r0, r1);
}

inline void decode_iq4(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                       std::size_t ldy) {
  gemv_iq4(w, *in.xa, n, y, ldy, r0, r1);
}

inline void decode_low_bit_kquant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                  float* y, std::size_t ldy) {
  gemv_low_bit_kquant(w, *in.xa, n, y, ldy, r0, r1);
}

inline void decode_unsigned_blocks(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                   float* y, std::size_t ldy) {
  gemv_unsigned_blocks(w, *in.xa, n, y, ldy, r0, r1);
}

// The tokens as int8 activations of at most Limit either way (a row's activation_limit).
template <int Limit>
inline void quantize_tokens_to(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out) {
  quantize_activations(x, ldx, n, k, out, static_cast<float>(Limit));
}
inline constexpr QuantizeTokensFn quantize_tokens = quantize_tokens_to<127>;
// The same with one scale per 256 (quantize_activations_per_256).
template <int Limit>
inline void quantize_tokens_per_256(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out) {
  quantize_activations_per_256(x, ldx, n, k, out, static_cast<float>(Limit));
}

inline constexpr PrefillFn kF32Tiles = prefill_f32_tiles<GemmF32, scalar_row_to_f32>;

inline constexpr MatmulKernel kRows[] = {
    {.type = DType::F32, .isa = Isa::Portable, .decode = decode_f32, .prefill = kF32Tiles},
    {.type = DType::Q8_0,
     .isa = Isa::Portable,
     .decode = decode_q8_0,
     .activations = ActivationLayout::Int8Blocks,
     .quantize = quantize_tokens,
     .prefill = kF32Tiles},
    {.type = DType::Q4_0,
     .isa = Isa::Portable,
     .decode = decode_q4_0,
     .activations = ActivationLayout::Int8Blocks,
     .quantize = quantize_tokens,
     .prefill = kF32Tiles},
};

// Every type without a row of its own, on every ISA.
inline constexpr MatmulKernel kAnyTypeRow{.type = DType::F32, .isa = Isa::Portable, .decode = decode_any, .prefill = kF32Tiles};

}  // namespace streamllm::kernels::portable
