// The AVX-512 rows of the kernel table (kernel.hpp), for CPUs with AVX-512
// BF16 and VNNI (runtime/cpu_features.hpp, Isa::Avx512Bf16Vnni).
//
// Decode: float rows (F32, and F16 / BF16 widened) against the tokens as
// they are, up to 16 tokens in passes of 8; every quantised type against
// int8 activations (vpdpbusd), Q8_0 and Q4_0 up to 16 tokens in 16-block
// groups (their rows repacked at load, quant/interleaved.hpp; IQ4_NL read
// as Q4_0 with looked-up quants), and up to 27 (the model's interleaved
// rows) or 48 in passes of 16, the others up to 4. Prefill: the int8 tiles
// (32 tokens a group; a rest after whole groups that the decode kernel takes
// at once goes to it; interleaved rows unpacked in their groups' order) for
// every quantised type; BF16 and F16 (rounded to bf16 a block at a time) on
// the bf16 tiles where vdpbf16ps is full rate (bf16_tiles(): AMD), elsewhere
// (Intel) with F32 on the f32 tiles, rows widened a block at a time.
#pragma once

#include <cstddef>
#include <span>

#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/matmul/portable/rows.hpp"

#include "streamllm/kernels/simd/target.hpp"
#ifdef STREAMLLM_HAVE_X86_KERNELS
#include "streamllm/kernels/matmul/avx512/activations.hpp"
#include "streamllm/kernels/matmul/avx512/float_rows.hpp"
#include "streamllm/kernels/matmul/avx512/float_tiles.hpp"
#include "streamllm/kernels/matmul/avx512/group_tiles.hpp"
#include "streamllm/kernels/matmul/avx512/int8_blocks.hpp"
#include "streamllm/kernels/matmul/avx512/int8_tiles.hpp"
#include "streamllm/kernels/matmul/avx512/kquants.hpp"
#include "streamllm/kernels/matmul/avx512/low_bit_kquants.hpp"
#include "streamllm/kernels/matmul/avx512/nonlinear_blocks.hpp"
#include "streamllm/kernels/matmul/avx512/super_blocks_per_256.hpp"
#include "streamllm/kernels/matmul/avx512/unsigned_blocks.hpp"
#endif

namespace streamllm::kernels::avx512 {

#ifdef STREAMLLM_HAVE_AVX512_KERNELS

// Float rows up to 8 tokens at once, and up to 16 in passes of 8 over rows
// the first pass left in L2; BF16's tiles are the faster from 9 tokens where
// it takes them. Q8_0 / Q4_0 groups up to 16 tokens, and more in passes of
// 16 up to a limit: the tiles unpack every weight block before use, which
// few tokens do not repay, while the groups' decode kernel reads the weights
// as they are, compute-bound from 8 tokens on, so a pass more costs little
// more than its arithmetic. The interleaved rows (the model's) unpack in
// their own order (group_tiles.hpp), cheaply enough that the tiles are the
// faster from 28 tokens; rows in the file's layout (which the model does not
// keep) unpack with a transpose, and take passes up to 48.
inline constexpr std::size_t kFloatDecodeTokens = 16;
inline constexpr std::size_t kBf16TileDecodeTokens = 8;
inline constexpr std::size_t kGroupDecodeTokens = 16;
inline constexpr std::size_t kGroupPassTokens = 48;
inline constexpr std::size_t kInterleavedPassTokens = 27;

template <class Row>
inline void decode_widened(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                           std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride), k = static_cast<std::size_t>(w.cols);
  constexpr std::size_t kPass = 8;
  for (std::size_t t0 = 0; t0 < n; t0 += kPass) {
    const float* xt = in.x + t0 * in.ldx;
    float* yt = y + t0 * ldy;
    with_tokens8(std::min(kPass, n - t0),
                 [&]<int NT>() { gemv_widen_rows<Row, NT>(r0, r1, w.data, stride, k, xt, in.ldx, yt, ldy); });
  }
}

template <class Row>
inline void decode_blocks(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                          std::size_t ldy) {
  gemv_int8_rows<Row>(r0, r1, w.data, static_cast<std::size_t>(w.row_stride), in.xa, n, y, ldy);
}

inline void decode_kquant(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                          std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  with_token_count(n, [&]<int NT>() { gemv_kquant_int8_rows<NT>(w.type, r0, r1, w.data, stride, *in.xa, y, ldy); });
}

template <class Format>
inline void decode_super_blocks_per_256(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                        float* y, std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  with_token_count(n, [&]<int NT>() { gemv_super_block_rows_per_256<Format, NT>(r0, r1, w.data, stride, *in.xa, y, ldy); });
}

template <class Block>
inline void decode_unsigned_blocks(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n,
                                   float* y, std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  with_token_count(n, [&]<int NT>() { gemv_unsigned_blocks_rows<Block, NT>(r0, r1, w.data, stride, *in.xa, y, ldy); });
}

inline void quantize_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out) {
  quantize_activations_avx512(x, ldx, n, k, out);
}
inline void quantize_tokens_per_256(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out) {
  quantize_activations_per_256_avx512(x, ldx, n, k, out);
}

// The tokens quantised, then interleaved for the 16-block groups of Row's rows.
template <class Row>
inline void quantize_tokens_for_groups(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out) {
  quantize_activations_avx512(x, ldx, n, k, out);
  interleave_groups_avx512(out, Row::kGroupShift);
}

inline void row_to_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  if (!dequantize_row_f32(t, src, cols, dst)) scalar_row_to_f32(t, src, cols, dst);
}

// BF16 rows, and F16 rows rounded to bf16 a block at a time, on the bf16
// tiles (k even: the tiles take pairs of k; an odd k takes the f32 tiles).
// The tokens are packed once for all the matrices that read them (wq, wk
// and wv; w_gate and w_up), whose row blocks then share one parallel loop
// (matmul_in_row_chunks): one packing instead of three, and no thread
// waiting at the end of each small matrix.
inline const void* pack_bf16_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k) {
  if (k % 2 != 0) return pack_tokens<GemmF32>(x, ldx, n, k);
  return pack_tokens<GemmBf16>(x, ldx, n, k);
}
inline void prefill_bf16_packed(const TensorView& w, const void* packed, std::size_t n, float* y, std::size_t ldy) {
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  if (k % 2 != 0) return gemm_packed<GemmF32>(DequantRowsF32{&w, row_to_f32}, m, k, static_cast<const float*>(packed), n, y, ldy);
  const auto* halves = reinterpret_cast<const std::uint16_t*>(w.data);
  const std::size_t ldw = static_cast<std::size_t>(w.row_stride) / sizeof(std::uint16_t);
  const auto* xp = static_cast<const std::uint16_t*>(packed);
  if (w.type == DType::F16) return gemm_packed<GemmBf16>(F16AsBf16Rows{halves, ldw}, m, k, xp, n, y, ldy);
  gemm_packed<GemmBf16>(CopyRows<std::uint16_t>{halves, ldw}, m, k, xp, n, y, ldy);
}
inline void prefill_bf16(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  prefill_bf16_packed(w, pack_bf16_tokens(x, ldx, n, static_cast<std::size_t>(w.cols)), n, y, ldy);
}

// Every format of the int8 tiles takes the same packed tokens.
inline const void* pack_int8_tokens(const float* x, std::size_t ldx, std::size_t n, std::size_t k) {
  return pack_tokens<GemmInt8<Int8Blocks>>(x, ldx, n, k);
}

template <class Format>
inline void prefill_int8_packed(const TensorView& w, const void* packed, std::size_t n, float* y, std::size_t ldy) {
  gemm_packed<GemmInt8<Format>>(Int8Rows<Format>{&w}, static_cast<std::size_t>(w.rows), static_cast<std::size_t>(w.cols),
                                static_cast<const std::uint8_t*>(packed), n, y, ldy);
}
template <class Format>
inline void prefill_int8(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  prefill_int8_packed<Format>(w, pack_int8_tokens(x, ldx, n, static_cast<std::size_t>(w.cols)), n, y, ldy);
}

// Interleaved rows on the tiles, each group unpacked in its own order.
inline void prefill_int8_groups_packed(const TensorView& w, const void* packed, std::size_t n, float* y, std::size_t ldy) {
  gemm_packed<GemmInt8Groups>(Int8GroupRows{&w}, static_cast<std::size_t>(w.rows), static_cast<std::size_t>(w.cols),
                              static_cast<const std::uint8_t*>(packed), n, y, ldy);
}
inline void prefill_int8_groups(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  prefill_int8_groups_packed(w, pack_int8_tokens(x, ldx, n, static_cast<std::size_t>(w.cols)), n, y, ldy);
}

// Q8_0 / Q4_0 rows to their 16-block groups (quant/interleaved.hpp).
inline void repack_groups(const TensorView& from, std::byte* to) {
  const auto stride = static_cast<std::size_t>(from.row_stride);
  const auto rows = static_cast<std::size_t>(from.rows), cols = static_cast<std::size_t>(from.cols);
  parallel_chunks(rows, 16, rows * cols, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r)
      interleave_row_avx512(from.type, from.row(static_cast<std::int64_t>(r)), to + r * stride, cols);
  });
}

inline bool full_rate_bf16() { return bf16_tiles(); }

inline constexpr PrefillFn kF32Tiles = prefill_f32_tiles<GemmF32Transposed, row_to_f32>;

constexpr MatmulKernel float_row(DType t, DecodeRowsFn decode) {
  return {.type = t,
          .isa = Isa::Avx512Bf16Vnni,
          .decode = decode,
          .decode_tokens = kFloatDecodeTokens,
          .twin = portable::gemv_dequant,
          .prefill = kF32Tiles};
}

// A quantised type on the int8 tiles of Format.
template <class Format>
constexpr MatmulKernel int8_row(DType t, DecodeRowsFn decode, DecodeRowsFn twin, std::size_t decode_tokens = kMaxGemvTokens,
                                ActivationLayout activations = ActivationLayout::Int8Blocks,
                                QuantizeTokensFn quantize = quantize_tokens) {
  return {.type = t,
          .isa = Isa::Avx512Bf16Vnni,
          .decode = decode,
          .decode_tokens = decode_tokens,
          .activations = activations,
          .quantize = quantize,
          .twin = twin,
          .tiles = Tiles::Int8,
          .prefill = prefill_int8<Format>,
          .pack = pack_int8_tokens,
          .prefill_packed = prefill_int8_packed<Format>,
          .tile_tokens = kInt8Tok,
          .tail_tokens = decode_tokens};
}

// Q2_K, Q3_K, Q4_K and IQ4_XS decode against activations with one scale
// per 256 (super_blocks_per_256.hpp), as llama.cpp's Q8_K; their tiles keep
// a scale per 32. Relative RMS error of a product of 2048 (a probe, normal
// weights; tokens normal, then with four channels of 40): the activations'
// per 32 0.0055 / 0.011, per 256 0.0069 / 0.032, against the weights' own
// Q2_K 0.27, Q3_K 0.14, Q4_K 0.080, IQ4_XS 0.073 / 0.080, Q5_K 0.036, Q6_K
// 0.018. So Q5_K and Q6_K, whose error it would raise by a quarter and by
// two thirds, keep a scale per 32; Q4_K's and IQ4_XS's grow by at most 7%.

template <class Format>
constexpr MatmulKernel kquant_row(DType t, DecodeRowsFn twin) {
  using Tiles = std::conditional_t<Format::kSubBlock == 32, Int8Q4K, std::conditional_t<Format::kMins, Int8Q2K, Int8Q6K>>;
  return int8_row<Tiles>(t, decode_super_blocks_per_256<Format>, twin, kMaxGemvTokens, ActivationLayout::Int8Blocks,
                         quantize_tokens_per_256);
}

// Q8_0 or Q4_0 (Row: the file's layout, or the groups it is repacked to at load).
template <class Row>
constexpr MatmulKernel group_row(DType t, DecodeRowsFn twin, ActivationLayout activations, DType repacked_type = DType::F32) {
  MatmulKernel row =
      int8_row<Int8Blocks>(t, decode_blocks<Row>, twin, kGroupDecodeTokens, activations, quantize_tokens_for_groups<Row>);
  row.pass_tokens = kGroupPassTokens;
  if (repacked_type != DType::F32) {
    row.repack = repack_groups;
    row.repacked_type = repacked_type;
  }
  return row;
}

// Q8_0x16 or Q4_0x16: the groups' decode kernel, and tiles that unpack them in their own order.
template <class Row>
constexpr MatmulKernel interleaved_row(DType t, DecodeRowsFn twin, ActivationLayout activations) {
  MatmulKernel row = group_row<Row>(t, twin, activations);
  row.prefill = prefill_int8_groups;
  row.prefill_packed = prefill_int8_groups_packed;
  row.pass_tokens = kInterleavedPassTokens;
  return row;
}

// F16 or BF16 on the bf16 tiles, where vdpbf16ps runs at full rate (AMD);
// the float_row of the type after it serves elsewhere. F16's weights round to
// bf16 in the tiles only: decode reads them as they are.
constexpr MatmulKernel bf16_tile_row(DType t, DecodeRowsFn decode) {
  return {.type = t,
          .isa = Isa::Avx512Bf16Vnni,
          .applies = full_rate_bf16,
          .decode = decode,
          .decode_tokens = kBf16TileDecodeTokens,
          .twin = portable::gemv_dequant,
          .tiles = Tiles::Bf16,
          .prefill = prefill_bf16,
          .pack = pack_bf16_tokens,
          .prefill_packed = prefill_bf16_packed,
          .tile_chunk_rows = 8 * kBf16Rows};
}

inline constexpr MatmulKernel kRows[] = {
    float_row(DType::F32, decode_widened<F32Row>),
    bf16_tile_row(DType::F16, decode_widened<F16Row>),
    float_row(DType::F16, decode_widened<F16Row>),
    bf16_tile_row(DType::BF16, decode_widened<BF16Row>),
    float_row(DType::BF16, decode_widened<BF16Row>),
    group_row<Q8_0Row>(DType::Q8_0, portable::gemv_q8_0, ActivationLayout::Int8GroupsQ8_0, DType::Q8_0x16),
    group_row<Q4_0Row>(DType::Q4_0, portable::gemv_q4_0, ActivationLayout::Int8GroupsQ4_0, DType::Q4_0x16),
    interleaved_row<Q8_0x16Row>(DType::Q8_0x16, portable::gemv_q8_0, ActivationLayout::Int8GroupsQ8_0),
    interleaved_row<Q4_0x16Row>(DType::Q4_0x16, portable::gemv_q4_0, ActivationLayout::Int8GroupsQ4_0),
    int8_row<Int8Blocks>(DType::Q5_0, decode_unsigned_blocks<quant::BlockQ5_0>, portable::gemv_unsigned_blocks),
    int8_row<Int8Q4K>(DType::Q4_1, decode_unsigned_blocks<quant::BlockQ4_1>, portable::gemv_unsigned_blocks),
    int8_row<Int8Q4K>(DType::Q5_1, decode_unsigned_blocks<quant::BlockQ5_1>, portable::gemv_unsigned_blocks),
    kquant_row<Q4KFormat>(DType::Q4_K, portable::gemv_kquant_int8),
    int8_row<Int8Q4K>(DType::Q5_K, decode_kquant, portable::gemv_kquant_int8),
    int8_row<Int8Q6K>(DType::Q6_K, decode_kquant, portable::gemv_kquant_int8),
    kquant_row<Q3KFormat>(DType::Q3_K, portable::gemv_low_bit_kquant),
    kquant_row<Q2KFormat>(DType::Q2_K, portable::gemv_low_bit_kquant),
    int8_row<Int8Blocks>(DType::IQ4_XS, decode_super_blocks_per_256<IQ4XSFormat>, portable::gemv_iq4, kMaxGemvTokens,
                         ActivationLayout::Int8Blocks, quantize_tokens_per_256),
    group_row<IQ4NLRow>(DType::IQ4_NL, portable::gemv_iq4, ActivationLayout::Int8GroupsQ8_0),
};

#else
inline constexpr std::span<const MatmulKernel> kRows{};
#endif

}  // namespace streamllm::kernels::avx512
