// The AVX2 rows of the kernel table (kernel.hpp), for x86 CPUs without
// AVX-512 (or whose hypervisor hides it).
//
// Decode: F16 and BF16 widened to f32; the blocks of 32 and the K-quants
// against int8 activations (vpmaddubsw). Prefill: the int8 tiles for all of
// them but F16, BF16 and Q8_0 (whose pair sums would saturate,
// int8_tiles.hpp), which take the f32 tiles over rows converted by the AVX2
// converters; F32 its rows read in place (f32_rows.hpp) and the f32 tiles,
// as the portable row does, compiled for AVX2.
//
// The tiles work in groups of 16 tokens and a group costs much of its price
// however few of its tokens are real (the f32 tiles convert every weight of
// the group's rows; both read them), while the decode kernels, in passes of
// 4 over rows still in L2, cost one read of the weights plus a little per
// token. So up to a limit the tokens go to the decode kernels whole (8 for
// the types on the int8 tiles, 12 for the others), and past whole groups a
// rest of up to a quarter group goes to them too: the limits are where the
// two cost the same (docs/kernel-measurements.md).
#pragma once

#include <cstddef>
#include <span>

#include "streamllm/kernels/matmul/f32_rows.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/matmul/portable/rows.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS
#include "streamllm/kernels/matmul/avx2/float_rows.hpp"
#include "streamllm/kernels/matmul/avx2/int8_blocks.hpp"
#include "streamllm/kernels/matmul/avx2/int8_tiles.hpp"
#include "streamllm/kernels/matmul/avx2/kquants.hpp"
#include "streamllm/kernels/matmul/avx2/nonlinear_blocks.hpp"
#endif

namespace streamllm::kernels::avx2 {

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

inline constexpr std::size_t kFloatTileDecodeTokens = 12;
inline constexpr std::size_t kInt8TileDecodeTokens = 8;

template <class Row>
inline void decode_widened(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                           std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride), k = static_cast<std::size_t>(w.cols);
  in_token_passes(n, [&]<int NT>(std::size_t t0) {
    gemv_widen_rows<Row, NT>(r0, r1, w.data, stride, k, in.x + t0 * in.ldx, in.ldx, y + t0 * ldy, ldy);
  });
}

template <class Row>
inline void decode_blocks(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                          std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  in_token_passes(
      n, [&]<int NT>(std::size_t t0) { gemv_int8_rows<Row, NT>(r0, r1, w.data, stride, in.xa->slice(t0), y + t0 * ldy, ldy); });
}

inline void decode_kquant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                          std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  in_token_passes(n, [&]<int NT>(std::size_t t0) {
    gemv_kquant_rows<NT>(w.type, r0, r1, w.data, stride, in.xa->slice(t0), y + t0 * ldy, ldy);
  });
}

inline void row_to_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  if (!dequantize_row_f32(t, src, cols, dst)) scalar_row_to_f32(t, src, cols, dst);
}

// Every format of the int8 tiles takes the same packed tokens, quantised to
// at most Limit either way.
template <int Limit>
inline const void* pack_int8_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k) {
  return pack_tokens<GemmInt8<Int8Blocks, 8, 8, Limit>>(x, ldx, n, k);
}

// The int8 tiles of Format, with Run quads' pair sums in int16, the quants'
// offset and the activations' limit.
template <class Format, std::size_t Run, int Offset, int Limit>
inline void prefill_int8_packed(const TensorView& w, const void* packed, std::size_t n, float* y, std::size_t ldy) {
  gemm_packed<GemmInt8<Format, Run, Offset, Limit>>(Int8Rows<Format>{&w}, static_cast<std::size_t>(w.rows),
                                                    static_cast<std::size_t>(w.cols), static_cast<const std::uint8_t*>(packed), n,
                                                    y, ldy);
}
template <class Format, std::size_t Run, int Offset, int Limit>
inline void prefill_int8(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  prefill_int8_packed<Format, Run, Offset, Limit>(w, pack_int8_tokens<Limit>(x, ldx, n, static_cast<std::size_t>(w.cols)), n, y,
                                                  ldy);
}

// A type on the f32 tiles, its decode kernel taking up to 12 tokens.
constexpr MatmulKernel float_tile_row(DType t, DecodeRowsFn decode, DecodeRowsFn twin, ActivationLayout activations,
                                      QuantizeTokensFn quantize) {
  return {.type = t,
          .isa = Isa::Avx2,
          .decode = decode,
          .decode_tokens = kFloatTileDecodeTokens,
          .activations = activations,
          .quantize = quantize,
          .twin = twin,
          .prefill = prefill_f32_tiles<GemmF32, row_to_f32>,
          .tile_tokens = GemmF32::kTok,
          .tail_tokens = GemmF32::kTok / 4};
}

// A type on the int8 tiles of Format (Run, Offset, Limit), its decode kernel against int8 activations.
template <class Format, std::size_t Run, int Offset, int Limit = 127>
constexpr MatmulKernel int8_tile_row(DType t, DecodeRowsFn decode, DecodeRowsFn twin) {
  return {.type = t,
          .isa = Isa::Avx2,
          .decode = decode,
          .decode_tokens = kInt8TileDecodeTokens,
          .activations = ActivationLayout::Int8Blocks,
          .quantize = portable::quantize_tokens_to<Limit>,
          .twin = twin,
          .tiles = Tiles::Int8,
          .prefill = prefill_int8<Format, Run, Offset, Limit>,
          .pack = pack_int8_tokens<Limit>,
          .prefill_packed = prefill_int8_packed<Format, Run, Offset, Limit>,
          .tile_tokens = kInt8Tok,
          .tail_tokens = kInt8Tok / 4,
          .activation_limit = Limit};
}

// Q2_K, Q3_K and Q4_K: the decode kernel takes its activations with one
// scale per 256 (low_bit_kquants.hpp, kquants.hpp: a super-block's integer
// sums added and scaled once, as llama.cpp's AVX2 kernels do for every
// K-quant); the tiles keep theirs per 32. The activations' error grows
// 1.3-2.2x (outliers), a tenth of Q2_K's and Q3_K's weights' own and Q4_K's
// by at most 7% (the probe in avx512/rows.hpp); Q5_K and Q6_K, whose error
// it would raise by a quarter and two thirds, keep a scale per 32, and
// IQ4_XS too, whose activations of 63 would double it again.
constexpr MatmulKernel with_decode_scale_per_256(MatmulKernel row) {
  row.quantize = portable::quantize_tokens_per_256<127>;
  return row;
}

inline constexpr MatmulKernel kRows[] = {
    {.type = DType::F32,
     .isa = Isa::Avx2,
     .decode = gemv_f32,
     .twin = portable::gemv_f32,
     .prefill = prefill_f32_tiles<GemmF32, scalar_row_to_f32>},
    float_tile_row(DType::F16, decode_widened<F16Row>, portable::gemv_dequant, ActivationLayout::Float, nullptr),
    float_tile_row(DType::BF16, decode_widened<BF16Row>, portable::gemv_dequant, ActivationLayout::Float, nullptr),
    float_tile_row(DType::Q8_0, decode_blocks<x86::Q8_0Row>, portable::gemv_q8_0, ActivationLayout::Int8Blocks,
                   portable::quantize_tokens),
    int8_tile_row<Int8Blocks, 8, 8>(DType::Q4_0, decode_blocks<x86::Q4_0Row>, portable::gemv_q4_0),
    int8_tile_row<Int8Blocks, 4, 16>(DType::Q5_0, decode_blocks<x86::Q5_0Row>, portable::gemv_unsigned_blocks),
    int8_tile_row<Int8Q4K, 8, 0>(DType::Q4_1, decode_blocks<x86::Q4_1Row>, portable::gemv_unsigned_blocks),
    int8_tile_row<Int8Q4K, 4, 0>(DType::Q5_1, decode_blocks<x86::Q5_1Row>, portable::gemv_unsigned_blocks),
    with_decode_scale_per_256(int8_tile_row<Int8Q4K, 8, 0>(DType::Q4_K, decode_kquant, portable::gemv_kquant_int8)),
    int8_tile_row<Int8Q4K, 4, 0>(DType::Q5_K, decode_kquant, portable::gemv_kquant_int8),
    int8_tile_row<Int8Q6K, 2, 32>(DType::Q6_K, decode_kquant, portable::gemv_kquant_int8),
    with_decode_scale_per_256(int8_tile_row<Int8Q2K, 4, 0>(DType::Q2_K, decode_kquant, portable::gemv_low_bit_kquant)),
    with_decode_scale_per_256(int8_tile_row<Int8Q6K, 4, 4>(DType::Q3_K, decode_kquant, portable::gemv_low_bit_kquant)),
    // The levels + 128 (up to 241) against activations of at most 63
    // (nonlinear_blocks.hpp, int8_tiles.hpp), in decode and in the tiles.
    int8_tile_row<Int8Blocks, 1, 128, 63>(DType::IQ4_NL, decode_blocks<IQ4NLRow>, portable::gemv_iq4),
    int8_tile_row<Int8Blocks, 1, 128, 63>(DType::IQ4_XS, decode_kquant, portable::gemv_iq4),
};

#else
inline constexpr std::span<const MatmulKernel> kRows{};
#endif

}  // namespace streamllm::kernels::avx2
