// One row of the kernel table (kernel_table.hpp): how y = x W^T runs for one
// weight type on one ISA. Few tokens take the row's decode kernel, which
// reads each weight once for all of them (memory-bound); more take its
// tiles (compute-bound). A row says which kernel, up to how many tokens,
// how it wants the tokens (ActivationLayout), how prefill reads the weights
// and the tokens, and what the weights are repacked to at load.
//
// Each ISA's rows are in its folder (portable/rows.hpp, avx2/rows.hpp,
// avx512/rows.hpp), next to the kernels they name; matmul.hpp is written
// once against this description.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "streamllm/core/dtype.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/gemm.hpp"
#include "streamllm/kernels/matmul/prefetch_rows.hpp"
#include "streamllm/kernels/runtime/cpu_features.hpp"
#include "streamllm/kernels/runtime/token_count.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

// The largest pass of the portable and AVX2 decode kernels, and the tokens
// a decode kernel takes unless its row says more.
inline constexpr std::size_t kMaxGemvTokens = 4;

// How a decode kernel reads the tokens. Kernels with the same layout (on
// one ISA) can share one quantisation of the tokens (matmul_shared).
enum class ActivationLayout : std::uint8_t {
  Float,           // the tokens as they are
  Int8Blocks,      // quantised to int8 per block of 32, with scale and sum (QuantizedActivations)
  Int8GroupsQ8_0,  // the same, interleaved for AVX-512's 16-block groups of Q8_0 rows
  Int8GroupsQ4_0,  // ... of Q4_0 rows
};

// What prefill's tiles multiply: f32 (rows read in place or converted a
// block at a time), bf16 pairs (vdpbf16ps), or int8 (the tokens quantised
// per block, the rows unpacked per block to int8 with their scales).
enum class Tiles : std::uint8_t { F32, Bf16, Int8 };

// What a decode kernel reads: the tokens, and for the int8 layouts their quantisation.
struct DecodeInput {
  const float* x;
  std::size_t ldx;
  const QuantizedActivations* xa;
};

// Rows [r0, r1) of w against n tokens: y[t][r] = W[r] . x[t].
using DecodeRowsFn = void (*)(const TensorView& w, std::size_t r0, std::size_t r1, const DecodeInput& in, std::size_t n, float* y,
                              std::size_t ldy);
// The n tokens of x quantised for a layout, into the caller's buffer (its
// memory grows to the largest call and stays: no allocation per call).
using QuantizeTokensFn = void (*)(const float* x, std::size_t ldx, std::size_t n, std::size_t k, QuantizedActivations& out);
// y = x W^T for many tokens (the tiles).
using PrefillFn = void (*)(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy);
// The tokens packed for a family of tiles, and the tiles over them: the
// rows with the same packing share one packing of the tokens (matmul_shared).
using PackTokensFn = const void* (*)(const float* x, std::size_t ldx, std::size_t n, std::size_t k);
using PackedPrefillFn = void (*)(const TensorView& w, const void* packed, std::size_t n, float* y, std::size_t ldy);
// A matrix's rows copied at load into the layout the row's kernels read.
using RepackFn = void (*)(const TensorView& from, std::byte* to);

struct MatmulKernel {
  DType type;
  Isa isa;
  // The row applies only where this is true (null: always); rows of one
  // (type, ISA) are tried in order. (BF16 on AVX-512: bf16 tiles or f32 ones.)
  bool (*applies)() = nullptr;

  // Decode: the kernel, the tokens it serves (1..decode_tokens), and how it reads them.
  DecodeRowsFn decode = nullptr;
  std::size_t decode_tokens = kMaxGemvTokens;
  ActivationLayout activations = ActivationLayout::Float;
  QuantizeTokensFn quantize = nullptr;  // for the int8 layouts
  // The portable kernel that does the same arithmetic on the file's layout
  // (the tests hold every row to it; null: the row is portable itself).
  DecodeRowsFn twin = nullptr;

  // Prefill: the tiles, for more tokens than decode_tokens.
  Tiles tiles = Tiles::F32;
  PrefillFn prefill = nullptr;
  PackTokensFn pack = nullptr;  // where the tiles read packed tokens (with prefill_packed)
  PackedPrefillFn prefill_packed = nullptr;
  // The tiles' group of tokens, and the rest past whole groups that goes to
  // the decode kernel instead (0: none does): a rest of a few tokens costs
  // the tiles a whole group of arithmetic, the decode kernel a pass over
  // rows the tiles have just read (from L2 with packed tokens, matmul.hpp;
  // else one more read of the weights).
  std::size_t tile_tokens = 0;
  std::size_t tail_tokens = 0;
  // Rows per chunk of the packed tiles' parallel loop (matmul_in_row_chunks):
  // a whole number of the micro-kernel's rows. 64 is one block of the int8
  // tiles' rows (kMc, on both ISAs), whose weights (64 rows of up to 6 KB:
  // w_down of TinyLlama in Q8_0) stay in L2 from the tiles to the decode
  // kernel; the bf16 tiles take eight of their 12-row tiles.
  std::size_t tile_chunk_rows = 64;
  // The row's int8 activations (its decode kernel's and its tiles') are
  // quantised to at most this either way: 127, but 63 where the weights
  // enter vpmaddubsw as unsigned bytes up to 241 (IQ4 on AVX2: 127 would
  // saturate its pair sums).
  int activation_limit = 127;
  // Up to this many tokens (more than decode_tokens), the decode kernel in
  // passes of decode_tokens instead of the tiles (0: never): where the
  // tiles unpack every weight block before use, which few groups of tokens
  // do not repay, and the decode kernel reads the weights as they are.
  std::size_t pass_tokens = 0;

  // Load: the type the weights are repacked to, and how (null: read as they are).
  RepackFn repack = nullptr;
  DType repacked_type = DType::F32;

  // Of n tokens, the first that the decode kernel serves (n: none): the
  // tiles take those before it.
  std::size_t decode_from(std::size_t n) const {
    if (n <= std::max(decode_tokens, pass_tokens)) return 0;
    const std::size_t rest = tile_tokens == 0 ? 0 : n % tile_tokens;
    return rest <= tail_tokens ? n - rest : n;
  }
};

// Rows per chunk of the decode kernels (parallel_chunks): about
// 256 KB of weights, a few tens of microseconds of streaming, in a number
// of equal chunks that is a multiple of the thread count: 9 chunks of wq
// over 2 threads leave one thread a whole chunk alone at the end of every
// call. With several tokens a chunk costs more time than its bytes say, and
// the small matrices (wk, wv: 256 rows of TinyLlama) would make two chunks,
// one doing nearly all: there, at least four chunks per thread.
inline std::size_t gemv_chunk_rows(std::size_t row_bytes, std::size_t rows, std::size_t tokens) {
  const auto threads = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
  std::size_t chunks = std::max<std::size_t>(1, (rows * row_bytes + (std::size_t(256) << 10) - 1) / (std::size_t(256) << 10));
  if (tokens > 1) chunks = std::max(chunks, 4 * threads);
  chunks = (chunks + threads - 1) / threads * threads;
  return std::max<std::size_t>(4, (rows + chunks - 1) / chunks);
}

// Calls f.template operator()<NT>() for NT = n (1..kMaxGemvTokens).
template <class F>
inline void with_token_count(std::size_t n, F&& f) {
  with_count<static_cast<int>(kMaxGemvTokens)>(n, std::forward<F>(f));
}

// Any n tokens in passes of up to kMaxGemvTokens: f.template
// operator()<NT>(t0) for tokens [t0, t0 + NT). A caller makes its passes
// over one chunk of rows, which the first pass leaves in L2.
template <class F>
inline void in_token_passes(std::size_t n, F&& f) {
  for (std::size_t t0 = 0; t0 < n; t0 += kMaxGemvTokens)
    with_token_count(std::min(kMaxGemvTokens, n - t0), [&]<int NT>() { f.template operator()<NT>(t0); });
}

// `cols` elements of a row of type t to f32: the f32 tiles' converter.
using RowToF32Fn = void (*)(DType t, const std::byte* src, std::size_t cols, float* dst);

// The scalar converter: every type, exact.
inline void scalar_row_to_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  quant::dequantize_row(t, src, static_cast<std::int64_t>(cols), dst);
}

// Rows of any type converted a block at a time to f32 for the f32 tiles.
struct DequantRowsF32 {
  const TensorView* w;
  RowToF32Fn to_f32;
  std::pair<const float*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                             AlignedVector<float>& scratch) const {
    float* out = grow(scratch, rows * kc);
    for (std::size_t i = 0; i < rows; ++i) {
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(w->type, static_cast<std::int64_t>(k0));
      prefetch_next_slice(*w, r0 + i, rows, k0 + kc, kc);
      to_f32(w->type, src, kc, out + i * kc);
    }
    return {out, kc};
  }
};

// The f32 tiles of policy Tiles over w's rows converted by ToF32 (F32 rows are read in place).
template <class Tiles, RowToF32Fn ToF32>
inline void prefill_f32_tiles(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  if (w.type == DType::F32)
    gemm<Tiles>(F32RowSource{reinterpret_cast<const float*>(w.data), k}, m, k, x, ldx, n, y, ldy);
  else
    gemm<Tiles>(DequantRowsF32{&w, ToF32}, m, k, x, ldx, n, y, ldy);
}

}  // namespace streamllm::kernels
