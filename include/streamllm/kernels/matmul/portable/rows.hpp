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

// The twins of the other families' int8 rows (not rows of their own: the
// portable path dequantises these types, faster in scalar code than their
// integer arithmetic) are gemv_kquant_int8, gemv_low_bit_kquant, gemv_iq4
// and gemv_unsigned_blocks, each in its header.

inline constexpr MatmulKernel kRows[] = {
    {.type = DType::F32, .isa = Isa::Portable, .decode = gemv_f32, .prefill = kF32Tiles},
    {.type = DType::Q8_0,
     .isa = Isa::Portable,
     .decode = gemv_q8_0,
     .activations = ActivationLayout::Int8Blocks,
     .quantize = quantize_tokens,
     .prefill = kF32Tiles},
    {.type = DType::Q4_0,
     .isa = Isa::Portable,
     .decode = gemv_q4_0,
     .activations = ActivationLayout::Int8Blocks,
     .quantize = quantize_tokens,
     .prefill = kF32Tiles},
};

// Every type without a row of its own, on every ISA.
inline constexpr MatmulKernel kAnyTypeRow{.type = DType::F32, .isa = Isa::Portable, .decode = gemv_dequant, .prefill = kF32Tiles};

}  // namespace streamllm::kernels::portable
