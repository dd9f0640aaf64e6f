// y = x W^T for a weight matrix of any supported type: the one dispatch per
// matrix call. Few tokens take the matrix-vector path (memory-bound: read
// each weight once, at bandwidth); many take the tiled matrix-matrix path
// (compute-bound).
//
//   type        few tokens (decode)                  many tokens (prefill)
//   F32         f32 FMA (xsimd)                       f32 tiles (xsimd)
//   F16         widened to f32, FMA                   converted to f32 per block, f32 tiles
//   BF16        widened to f32, FMA                   bf16 tiles, vdpbf16ps (*)
//   Q8_0, Q4_0  int8 activations, vpdpbusd            unpacked to int8 per block, int8 tiles, vpdpbusd
//   (and their interleaved forms, Q8_0x16 and Q4_0x16, which the model makes at load)
//   Q4_K, Q5_K, int8 activations, vpdpbusd            unpacked to int8 per block (their own sub-block
//   Q6_K                                              scales and mins), int8 tiles, vpdpbusd
//   Q4_1, Q5_0, int8 activations, vpdpbusd            unpacked to int8 per block (Q5_0 as q - 16,
//   Q5_1        (gemv_unsigned_blocks.hpp)            Q4_1 / Q5_1 with m per block), int8 tiles
//               (llama.cpp's older types, and its fallbacks for rows the K-quants cannot take)
// (*) where vdpbf16ps is full rate (bf16_tiles(): AMD); elsewhere (Intel)
// widened to f32 per block, f32 tiles.
// Without AVX-512 BF16/VNNI, where the CPU has AVX2 and FMA (Isa::Avx2),
// decode of F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants takes
// the AVX2 kernels (the same conversions and int8 activations, vpmaddubsw
// for the integer dot products), and prefill of all of these but F16, BF16
// and Q8_0 the AVX2 int8 tiles (gemm_int8_avx2.hpp); those three take the
// f32 tiles, their rows converted by the AVX2 converters (x86_avx2.hpp).
// There the matrix-vector kernels take more tokens than elsewhere (up to 8
// for the types on the int8 tiles, 12 for F16, BF16 and Q8_0, in passes of
// 4) and a rest of up to 4 tokens past whole groups of the tiles
// (gemv_tail).
// Everything else (or everything, forced to Isa::Portable) takes the xsimd
// paths: f32 FMA over dequantised rows, and f32 tiles.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/error.hpp"
#include "streamllm/kernels/activations_q8.hpp"
#include "streamllm/kernels/cpu_features.hpp"
#include "streamllm/kernels/gemm.hpp"
#include "streamllm/kernels/gemm_int8.hpp"
#include "streamllm/kernels/gemm_int8_avx2.hpp"
#include "streamllm/kernels/gemv_f32.hpp"
#include "streamllm/kernels/gemv_typed.hpp"
#include "streamllm/kernels/gemv_unsigned_blocks.hpp"
#include "streamllm/kernels/prefetch_rows.hpp"
#include "streamllm/kernels/threading.hpp"
#include "streamllm/kernels/token_count.hpp"
#include "streamllm/kernels/x86_avx2.hpp"
#include "streamllm/kernels/x86_avx512.hpp"
#include "streamllm/quant/blocks.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

// Up to this many tokens, reading each weight row once for all of them in
// the matrix-vector kernels beats packing them for the tiled kernels. The
// AVX-512 kernels go further: float rows up to 8 tokens at once, F32 and
// F16 up to 16 in passes of 8; BF16's tiles are the faster at 16 where it
// takes them (bf16_tiles(); elsewhere BF16 is F16's case). Int8 rows up to 16.
inline constexpr std::size_t kMaxGemvTokens = 4;
inline constexpr std::size_t kMaxFloatGemvTokens = 16;
inline constexpr std::size_t kMaxBf16GemvTokens = 8;
inline constexpr std::size_t kMaxInt8GemvTokens = 16;

// The types the int8 kernels (vpdpbusd) take in blocks of 32 with one scale.
constexpr bool is_int8_blocks(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || quant::is_interleaved(t); }

// The types whose prefill takes the int8 tiles (VNNI): the blocks of 32, the
// K-quants with their sub-block scales and the unsigned blocks with their
// offsets (gemm_int8.hpp).
constexpr bool has_int8_tiles(DType t) { return is_int8_blocks(t) || is_kquant(t) || is_unsigned_blocks(t); }

// On AVX2 the tiles work in groups of 16 tokens and a group costs much of
// its price however few of its tokens are real (the f32 tiles convert every
// weight of the group's rows; both read them), while the matrix-vector
// kernels, in passes of kMaxGemvTokens over rows still in L2, cost one read
// of the weights plus a little per token. So up to a limit the tokens go to
// those kernels whole, and past whole groups a rest of up to a quarter group
// goes to them too (TinyLlama, 2 threads, bench_types Turn/<type> on a Zen 3
// EPYC: the limits are where the two cost the same).
inline constexpr std::size_t kMaxAvx2FloatTileGemvTokens = 12;
inline constexpr std::size_t kMaxAvx2Int8TileGemvTokens = 8;

// AVX2 weight types whose matrix-vector kernel takes any number of tokens
// (in passes) and whose prefill takes the f32 tiles.
constexpr bool avx2_gemv_before_f32_tiles(DType t) { return t == DType::Q8_0 || t == DType::F16 || t == DType::BF16; }

// Of n tokens (more than gemv_token_limit), how many at the end go to the
// matrix-vector kernels instead of a group of the tiles of their own.
inline std::size_t gemv_tail(const TensorView& w, std::size_t n, Isa isa) {
  if (isa != Isa::Avx2) return 0;
  std::size_t group = 0;
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
  if (avx2::has_int8_tiles(w.type)) group = avx2::kInt8Tok;
#endif
  if (avx2_gemv_before_f32_tiles(w.type)) group = GemmF32::kTok;
  if (group == 0) return 0;
  const std::size_t rest = n % group;
  return rest <= group / 4 ? rest : 0;
}

inline std::size_t gemv_token_limit(const TensorView& w, Isa isa) {
  if (isa == Isa::Avx2) {
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
    if (avx2::has_int8_tiles(w.type)) return kMaxAvx2Int8TileGemvTokens;
#endif
    if (avx2_gemv_before_f32_tiles(w.type)) return kMaxAvx2FloatTileGemvTokens;
  }
  if (isa != Isa::Avx512Bf16Vnni) return kMaxGemvTokens;
  switch (w.type) {
    case DType::F32:
    case DType::F16: return kMaxFloatGemvTokens;
    case DType::BF16: return bf16_tiles() ? kMaxBf16GemvTokens : kMaxFloatGemvTokens;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q8_0x16:
    case DType::Q4_0x16: return kMaxInt8GemvTokens;
    default: return kMaxGemvTokens;
  }
}

// Rows per chunk that threads take in turn in the matrix-vector kernels:
// about 256 KB of weights, a few tens of microseconds of streaming, in a
// number of equal chunks that is a multiple of the thread count: 9 chunks of
// wq over 2 threads leave one thread a whole chunk alone at the end of every
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

inline void gemv_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                     std::size_t ldy) {
  parallel_chunks(m, gemv_chunk_rows(k * sizeof(float), m, n), m * k * n, [&](std::size_t r0, std::size_t r1) {
    in_token_passes(n, [&]<int NT>(std::size_t t0) { gemv_f32_rows<NT>(w, k, k, x + t0 * ldx, ldx, y + t0 * ldy, ldy, r0, r1); });
  });
}

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
// The activations of the int8 decode kernels, quantised per token and block,
// and for Q8_0 / Q4_0 interleaved for the kernel of 16-block groups (the
// K-quants read them in order). The instance is the calling thread's: the
// workers of a parallel loop must be handed the pointer.
inline const QuantizedActivations* int8_activations(DType type, const float* x, std::size_t ldx, std::size_t n, std::size_t k) {
  static thread_local QuantizedActivations xa;
  avx512::quantize_activations_avx512(x, ldx, n, k, xa);
  if (is_int8_blocks(type))
    avx512::interleave_groups_avx512(
        xa, quant::base_type(type) == DType::Q8_0 ? avx512::Q8_0Row::kGroupShift : avx512::Q4_0Row::kGroupShift);
  return &xa;
}

[[gnu::noinline]] inline void gemv_int8_rows(DType type, std::size_t r0, std::size_t r1, const std::byte* w, std::size_t stride,
                                             const QuantizedActivations* xa, std::size_t n, float* y, std::size_t ldy) {
  switch (type) {
    case DType::Q8_0: return avx512::gemv_int8_rows<avx512::Q8_0Row>(r0, r1, w, stride, xa, n, y, ldy);
    case DType::Q4_0: return avx512::gemv_int8_rows<avx512::Q4_0Row>(r0, r1, w, stride, xa, n, y, ldy);
    case DType::Q8_0x16: return avx512::gemv_int8_rows<avx512::Q8_0x16Row>(r0, r1, w, stride, xa, n, y, ldy);
    default: return avx512::gemv_int8_rows<avx512::Q4_0x16Row>(r0, r1, w, stride, xa, n, y, ldy);
  }
}
#endif

// ---- Decode against int8 activations, any ISA ------------------------------
//
// The types whose matrix-vector kernel on `isa` reads the tokens quantised
// to int8 blocks (decode_activations) rather than as floats.
inline bool has_int8_gemv(DType t, Isa isa) {
  const bool blocks = t == DType::Q8_0 || t == DType::Q4_0, kquant = is_kquant(t);
  if (isa == Isa::Avx512Bf16Vnni) return is_int8_blocks(t) || kquant || is_unsigned_blocks(t);
  if (isa == Isa::Avx2) return blocks || kquant || is_unsigned_blocks(t);
  return blocks;
}

// Which activations those kernels read: types with the same key on `isa`
// can share one quantisation. The AVX-512 kernels of blocks of 32 take them
// interleaved for their 16-block groups, Q8_0's way or Q4_0's; every other
// kernel in plain blocks.
inline int int8_activation_layout(DType t, Isa isa) {
  if (isa != Isa::Avx512Bf16Vnni || !is_int8_blocks(t)) return 0;
  return quant::base_type(t) == DType::Q8_0 ? 1 : 2;
}

// The n tokens of x quantised for t's kernel on `isa`, in the calling
// thread's buffer (valid until its next call; workers must be handed the pointer).
inline const QuantizedActivations* decode_activations([[maybe_unused]] DType t, [[maybe_unused]] Isa isa, const float* x,
                                                      std::size_t ldx, std::size_t n, std::size_t k) {
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  if (isa == Isa::Avx512Bf16Vnni) return int8_activations(t, x, ldx, n, k);
#endif
  static thread_local QuantizedActivations xa;
  quantize_activations(x, ldx, n, k, xa);
  return &xa;
}

// Rows [r0, r1) of w (has_int8_gemv on isa) against n tokens' int8
// activations. Each family of kernels is a function of its own: inlined all
// into one (with -march=native), the K-quant loop lost registers to the
// others' and decode was slower.
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
[[gnu::noinline]] inline void avx512_kquant_chunk(const TensorView& w, std::size_t r0, std::size_t r1,
                                                  const QuantizedActivations& xa, std::size_t n, float* y, std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  with_token_count(n, [&]<int NT>() { avx512::gemv_kquant_int8_rows<NT>(w.type, r0, r1, w.data, stride, xa, y, ldy); });
}
[[gnu::noinline]] inline void avx512_unsigned_blocks_chunk(const TensorView& w, std::size_t r0, std::size_t r1,
                                                           const QuantizedActivations& xa, std::size_t n, float* y,
                                                           std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  with_token_count(n, [&]<int NT>() {
    with_unsigned_block(
        w.type, [&](auto tag) { avx512::gemv_unsigned_blocks_rows<decltype(tag), NT>(r0, r1, w.data, stride, xa, y, ldy); });
  });
}
#endif
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
[[gnu::noinline]] inline void avx2_int8_chunk(const TensorView& w, std::size_t r0, std::size_t r1, const QuantizedActivations& xa,
                                              std::size_t n, float* y, std::size_t ldy) {
  const auto stride = static_cast<std::size_t>(w.row_stride);
  in_token_passes(n, [&]<int NT>(std::size_t t0) {
    const QuantizedActivations::Slice xs = xa.slice(t0);
    float* yt = y + t0 * ldy;
    if (is_kquant(w.type)) return avx2::gemv_kquant_rows<NT>(w.type, r0, r1, w.data, stride, xs, yt, ldy);
    switch (w.type) {
      case DType::Q8_0: return avx2::gemv_int8_rows<avx2::Q8_0Row, NT>(r0, r1, w.data, stride, xs, yt, ldy);
      case DType::Q5_0: return avx2::gemv_int8_rows<avx2::Q5_0Row, NT>(r0, r1, w.data, stride, xs, yt, ldy);
      case DType::Q4_1: return avx2::gemv_int8_rows<avx2::Q4_1Row, NT>(r0, r1, w.data, stride, xs, yt, ldy);
      case DType::Q5_1: return avx2::gemv_int8_rows<avx2::Q5_1Row, NT>(r0, r1, w.data, stride, xs, yt, ldy);
      default: return avx2::gemv_int8_rows<avx2::Q4_0Row, NT>(r0, r1, w.data, stride, xs, yt, ldy);
    }
  });
}
#endif

inline void gemv_int8_chunk(const TensorView& w, [[maybe_unused]] Isa isa, std::size_t r0, std::size_t r1,
                            const QuantizedActivations* xa, std::size_t n, float* y, std::size_t ldy) {
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  if (isa == Isa::Avx512Bf16Vnni) {
    if (is_kquant(w.type)) return avx512_kquant_chunk(w, r0, r1, *xa, n, y, ldy);
    if (is_unsigned_blocks(w.type)) return avx512_unsigned_blocks_chunk(w, r0, r1, *xa, n, y, ldy);
    return gemv_int8_rows(w.type, r0, r1, w.data, static_cast<std::size_t>(w.row_stride), xa, n, y, ldy);
  }
#endif
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
  if (isa == Isa::Avx2) return avx2_int8_chunk(w, r0, r1, *xa, n, y, ldy);
#endif
  if (w.type == DType::Q8_0) return portable::gemv_q8_0(w, *xa, n, y, ldy, r0, r1);
  portable::gemv_q4_0(w, *xa, n, y, ldy, r0, r1);
}

// Few tokens, any type.
inline void gemv(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy, Isa isa) {
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  const auto stride = static_cast<std::size_t>(w.row_stride);
  const std::size_t work = m * k * n, chunk = gemv_chunk_rows(stride, m, n);
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  if (isa == Isa::Avx512Bf16Vnni) {
    switch (w.type) {
      case DType::F32:
      case DType::F16:
      case DType::BF16:
        // Past 8 tokens (the kernel's largest NT), passes of 8 over the
        // chunk, whose rows the first pass left in L2.
        return parallel_chunks(m, chunk, work, [&](std::size_t r0, std::size_t r1) {
          constexpr std::size_t kPass = 8;
          for (std::size_t t0 = 0; t0 < n; t0 += kPass) {
            const float* xt = x + t0 * ldx;
            float* yt = y + t0 * ldy;
            avx512::with_tokens8(std::min(kPass, n - t0), [&]<int NT>() {
              if (w.type == DType::F32)
                avx512::gemv_widen_rows<avx512::F32Row, NT>(r0, r1, w.data, stride, k, xt, ldx, yt, ldy);
              else if (w.type == DType::F16)
                avx512::gemv_widen_rows<avx512::F16Row, NT>(r0, r1, w.data, stride, k, xt, ldx, yt, ldy);
              else
                avx512::gemv_widen_rows<avx512::BF16Row, NT>(r0, r1, w.data, stride, k, xt, ldx, yt, ldy);
            });
          }
        });
      default: break;
    }
  }
#endif
  if (has_int8_gemv(w.type, isa)) {
    const QuantizedActivations* xa = decode_activations(w.type, isa, x, ldx, n, k);
    return parallel_chunks(m, chunk, work,
                           [&](std::size_t r0, std::size_t r1) { gemv_int8_chunk(w, isa, r0, r1, xa, n, y, ldy); });
  }
  if (w.type == DType::F32) return gemv_f32(reinterpret_cast<const float*>(w.data), m, k, x, ldx, n, y, ldy);
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
  if (isa == Isa::Avx2 && (w.type == DType::F16 || w.type == DType::BF16))
    return parallel_chunks(m, chunk, work, [&](std::size_t r0, std::size_t r1) {
      in_token_passes(n, [&]<int NT>(std::size_t t0) {
        if (w.type == DType::F16)
          avx2::gemv_widen_rows<avx2::F16Row, NT>(r0, r1, w.data, stride, k, x + t0 * ldx, ldx, y + t0 * ldy, ldy);
        else
          avx2::gemv_widen_rows<avx2::BF16Row, NT>(r0, r1, w.data, stride, k, x + t0 * ldx, ldx, y + t0 * ldy, ldy);
      });
    });
#endif
  parallel_chunks(m, chunk, work, [&](std::size_t r0, std::size_t r1) { portable::gemv_dequant(w, x, ldx, n, y, ldy, r0, r1); });
}

// Rows of any type converted a block at a time to f32 (the f32 tiles), by
// the vector converters of `isa` where there is one.
struct DequantRowsF32 {
  const TensorView* w;
  Isa isa;
  std::pair<const float*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kc,
                                             AlignedVector<float>& scratch) const {
    float* out = grow(scratch, rows * kc);
    for (std::size_t i = 0; i < rows; ++i) {
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(w->type, static_cast<std::int64_t>(k0));
      prefetch_next_slice(*w, r0 + i, rows, k0 + kc, kc);
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
      if (isa == Isa::Avx512Bf16Vnni && avx512::dequantize_row_f32(w->type, src, kc, out + i * kc)) continue;
#endif
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
      if (isa == Isa::Avx2 && avx2::dequantize_row_f32(w->type, src, kc, out + i * kc)) continue;
#endif
      quant::dequantize_row(w->type, src, static_cast<std::int64_t>(kc), out + i * kc);
    }
    return {out, kc};
  }
};

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
// The int8 tiles of w (a type with has_int8_tiles) over tokens packed for
// them: every weight format takes the same packed activations.
using GemmInt8Tokens = avx512::GemmInt8<Int8Blocks>;
inline void gemm_int8_packed(const TensorView& w, const std::uint8_t* xp, std::size_t n, float* y, std::size_t ldy) {
  using namespace avx512;
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  if (w.type == DType::Q4_K || w.type == DType::Q5_K || w.type == DType::Q4_1 || w.type == DType::Q5_1)
    return gemm_packed<GemmInt8<Int8Q4K>>(Int8Rows<Int8Q4K>{&w}, m, k, xp, n, y, ldy);
  if (w.type == DType::Q6_K) return gemm_packed<GemmInt8<Int8Q6K>>(Int8Rows<Int8Q6K>{&w}, m, k, xp, n, y, ldy);
  gemm_packed<GemmInt8<Int8Blocks>>(Int8Rows<Int8Blocks>{&w}, m, k, xp, n, y, ldy);
}
#endif

#ifdef STREAMLLM_HAVE_AVX2_KERNELS
// The AVX2 int8 tiles of w (avx2::has_int8_tiles) over tokens packed for
// them; a run of Run quads' pair sums stays within int16 (gemm_int8_avx2.hpp).
using Avx2Int8Tokens = avx2::GemmInt8<Int8Blocks, 8, 8>;
inline void gemm_int8_packed_avx2(const TensorView& w, const std::uint8_t* xp, std::size_t n, float* y, std::size_t ldy) {
  using namespace avx2;
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
  switch (w.type) {
    case DType::Q4_K:
    case DType::Q4_1: return gemm_packed<GemmInt8<Int8Q4K, 8, 0>>(Int8Rows<Int8Q4K>{&w}, m, k, xp, n, y, ldy);
    case DType::Q5_K:
    case DType::Q5_1: return gemm_packed<GemmInt8<Int8Q4K, 4, 0>>(Int8Rows<Int8Q4K>{&w}, m, k, xp, n, y, ldy);
    case DType::Q6_K: return gemm_packed<GemmInt8<Int8Q6K, 2, 32>>(Int8Rows<Int8Q6K>{&w}, m, k, xp, n, y, ldy);
    case DType::Q5_0: return gemm_packed<GemmInt8<Int8Blocks, 4, 16>>(Int8Rows<Int8Blocks>{&w}, m, k, xp, n, y, ldy);
    default: break;
  }
  gemm_packed<GemmInt8<Int8Blocks, 8, 8>>(Int8Rows<Int8Blocks>{&w}, m, k, xp, n, y, ldy);
}
#endif

// Many tokens, any type.
inline void gemm_typed(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy, Isa isa) {
  const auto m = static_cast<std::size_t>(w.rows), k = static_cast<std::size_t>(w.cols);
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  if (isa == Isa::Avx512Bf16Vnni && w.type == DType::F32)
    return gemm<avx512::GemmF32Transposed>(F32RowSource{reinterpret_cast<const float*>(w.data), k}, m, k, x, ldx, n, y, ldy);
  const bool int8_tiles = has_int8_tiles(w.type);
  if (isa == Isa::Avx512Bf16Vnni && !int8_tiles && (w.type == DType::F16 || !bf16_tiles()))
    return gemm<avx512::GemmF32Transposed>(DequantRowsF32{&w, isa}, m, k, x, ldx, n, y, ldy);
#endif
  if (w.type == DType::F32)
    return gemm<GemmF32>(F32RowSource{reinterpret_cast<const float*>(w.data), k}, m, k, x, ldx, n, y, ldy);
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  if (isa == Isa::Avx512Bf16Vnni && k % 2 == 0) {
    if (int8_tiles) return gemm_int8_packed(w, pack_tokens<GemmInt8Tokens>(x, ldx, n, k), n, y, ldy);
    if (w.type == DType::BF16)  // here only where bf16_tiles()
      return gemm<avx512::GemmBf16>(CopyRows<std::uint16_t>{reinterpret_cast<const std::uint16_t*>(w.data), k}, m, k, x, ldx, n,
                                    y, ldy);
  }
#endif
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
  if (isa == Isa::Avx2 && avx2::has_int8_tiles(w.type))
    return gemm_int8_packed_avx2(w, pack_tokens<Avx2Int8Tokens>(x, ldx, n, k), n, y, ldy);
#endif
  gemm<GemmF32>(DequantRowsF32{&w, isa}, m, k, x, ldx, n, y, ldy);
}

inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                       std::size_t ldy) {
  if (n <= kMaxGemvTokens)
    gemv_f32(w, m, k, x, ldx, n, y, ldy);
  else
    gemm<GemmF32>(F32RowSource{w, k}, m, k, x, ldx, n, y, ldy);
}

// y[n][ldy] = x[n][ldx] * W^T, for the first W.rows outputs of each row of y.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy,
                   Isa isa = active_isa()) {
  if (n == 0) return;
  if (n <= gemv_token_limit(w, isa)) return gemv(w, x, n, ldx, y, ldy, isa);
  const std::size_t tail = gemv_tail(w, n, isa), tiled = n - tail;
  gemm_typed(w, x, tiled, ldx, y, ldy, isa);
  if (tail) gemv(w, x + tiled * ldx, tail, ldx, y + tiled * ldy, ldy, isa);
}

// One product of matmul_shared: y[n][ldy] = x W^T.
struct MatmulTarget {
  const TensorView* w;
  float* y;
  std::size_t ldy;
};

// Several matrices against the same activations (wq, wk, wv; w_gate, w_up).
// On the int8 decode paths, when their kernels read the same activations
// (int8_activation_layout: Q4_K with Q6_K, as a Q4_K_M file mixes them, and
// on AVX2 any of the four types), the tokens are quantised once for all of
// them and the rows of all the matrices are chunks of one parallel loop: one
// fork-join instead of several, and the small matrices' chunks fill the
// threads' tails. On the int8 tiles (prefill) the tokens are packed once for
// all of them, whatever their formats. Otherwise one matmul per target.
inline void matmul_shared(std::span<const MatmulTarget> targets, const float* x, std::size_t n, std::size_t ldx,
                          Isa isa = active_isa()) {
  if (n == 0 || targets.empty()) return;
  const DType type = targets[0].w->type;
  const auto k = static_cast<std::size_t>(targets[0].w->cols);
  const bool fused = std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
    return has_int8_gemv(t.w->type, isa) && int8_activation_layout(t.w->type, isa) == int8_activation_layout(type, isa) &&
           static_cast<std::size_t>(t.w->cols) == k && n <= gemv_token_limit(*t.w, isa);
  });
  if (fused) {
    const QuantizedActivations* xa = decode_activations(type, isa, x, ldx, n, k);
    struct Chunk {
      const MatmulTarget* target;
      std::size_t r0, r1;
    };
    static thread_local std::vector<Chunk> chunks;
    chunks.clear();
    std::size_t work = 0;
    for (const MatmulTarget& t : targets) {
      const auto m = static_cast<std::size_t>(t.w->rows);
      const std::size_t rows = gemv_chunk_rows(static_cast<std::size_t>(t.w->row_stride), m, n);
      for (std::size_t r0 = 0; r0 < m; r0 += rows) chunks.push_back({&t, r0, std::min(m, r0 + rows)});
      work += m * k * n;
    }
    const Chunk* list = chunks.data();  // the workers must not read their own thread_local
    parallel_chunks(chunks.size(), 1, work, [&](std::size_t c0, std::size_t c1) {
      for (std::size_t c = c0; c < c1; ++c)
        gemv_int8_chunk(*list[c].target->w, isa, list[c].r0, list[c].r1, xa, n, list[c].target->y, list[c].target->ldy);
    });
    return;
  }
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
  const bool shared_tiles =
      isa == Isa::Avx512Bf16Vnni && k % 2 == 0 && std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
        return has_int8_tiles(t.w->type) && static_cast<std::size_t>(t.w->cols) == k && n > gemv_token_limit(*t.w, isa);
      });
  if (shared_tiles) {
    const std::uint8_t* xp = pack_tokens<GemmInt8Tokens>(x, ldx, n, k);
    for (const MatmulTarget& t : targets) gemm_int8_packed(*t.w, xp, n, t.y, t.ldy);
    return;
  }
#endif
#ifdef STREAMLLM_HAVE_AVX2_KERNELS
  const bool avx2_tiles =
      isa == Isa::Avx2 && std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
        return avx2::has_int8_tiles(t.w->type) && static_cast<std::size_t>(t.w->cols) == k && n > gemv_token_limit(*t.w, isa);
      });
  if (avx2_tiles) {
    const std::size_t tail = gemv_tail(*targets[0].w, n, isa), tiled = n - tail;
    const std::uint8_t* xp = pack_tokens<Avx2Int8Tokens>(x, ldx, tiled, k);
    for (const MatmulTarget& t : targets) gemm_int8_packed_avx2(*t.w, xp, tiled, t.y, t.ldy);
    if (tail) {  // the same targets from token `tiled` on (few enough for the gemv: no recursion here)
      static thread_local std::vector<MatmulTarget> rest;
      rest.assign(targets.begin(), targets.end());
      for (MatmulTarget& t : rest) t.y += tiled * t.ldy;
      matmul_shared(rest, x + tiled * ldx, tail, ldx, isa);
    }
    return;
  }
#endif
  for (const MatmulTarget& t : targets) matmul(*t.w, x, n, ldx, t.y, t.ldy, isa);
}

namespace scalar {
// The oracle: Eigen's product over the same memory, in double.
inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx, std::size_t n, float* y,
                       std::size_t ldy) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> W(w, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(k));
  const Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>> X(x, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k),
                                                              Eigen::OuterStride<>(static_cast<Eigen::Index>(ldx)));
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> Y(y, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(m),
                                                  Eigen::OuterStride<>(static_cast<Eigen::Index>(ldy)));
  Y = (X.cast<double>() * W.cast<double>().transpose()).cast<float>();
}

// Any type: rows dequantised exactly, then the f32 oracle.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y, std::size_t ldy) {
  std::vector<float> dense(static_cast<std::size_t>(w.rows * w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r) quant::dequantize_row(w.type, w.row(r), w.cols, dense.data() + r * w.cols);
  matmul_f32(dense.data(), static_cast<std::size_t>(w.rows), static_cast<std::size_t>(w.cols), x, ldx, n, y, ldy);
}
}  // namespace scalar

}  // namespace streamllm::kernels
