// AVX-512 kernels for the typed weights: float rows (F16/BF16 widened to f32),
// Q8_0/Q4_0 and Q4_K/Q5_K/Q6_K rows multiplied with int8 activations by VNNI (vpdpbusd), and a
// BF16 tiled matrix-matrix product (vdpbf16ps) for prefill. Compiled with a
// target attribute whatever the build flags, and chosen at run time
// (cpu_features.hpp), so a portable binary still uses them where they exist.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STREAMLLM_HAVE_AVX512_KERNELS 1

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "streamllm/dtype.hpp"
#include "streamllm/kernels/activations_q8.hpp"
#include "streamllm/kernels/avx512_warnings.hpp"
#include "streamllm/kernels/gemm.hpp"
#include "streamllm/kernels/token_count.hpp"
#include "streamllm/quant/blocks.hpp"

#define STREAMLLM_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx512vbmi")))

STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Sum of the 16 lanes. (Not _mm512_reduce_add_ps: GCC 12's version reads an
// "undefined" register that -Wuninitialized reports.)
STREAMLLM_AVX512 inline float hsum(__m512 v) {
  const __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 h = _mm512_castps512_ps256(s);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// ---- Float rows: F32, and F16 / BF16 widened to f32 (exact activations) -------

struct F32Row {
  static constexpr std::size_t kBytes = 4;
  STREAMLLM_AVX512 static __m512 load(const std::byte* row, std::size_t k) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
  STREAMLLM_AVX512 static __m512 load_tail(const std::byte* row, std::size_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  }
};

struct F16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX512 static __m512 load(const std::byte* row, std::size_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  STREAMLLM_AVX512 static __m512 load_tail(const std::byte* row, std::size_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  }
};

struct BF16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX512 static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  STREAMLLM_AVX512 static __m512 load(const std::byte* row, std::size_t k) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  STREAMLLM_AVX512 static __m512 load_tail(const std::byte* row, std::size_t k, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  }
};

// Decode streams the weights once, front to back. The int8 kernels of
// several tokens read rows one after the other (one sequential stream, which
// the hardware prefetcher follows), with a software prefetch this far ahead
// for the first lines of each row; the K-quant kernels likewise, further
// (kInt8PrefetchBytes); the float kernels and one token's int8 kernel read
// four streams (below).
inline constexpr std::size_t kPrefetchBytes = 2048;
inline constexpr bool kPrefetchInt8 = true;  // measured: Q4_0 22 vs 17 GB/s without

STREAMLLM_AVX512 inline void prefetch_ahead(const std::byte* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Row r against NT tokens: y[t][r] = W[r] . x[t]. Four vectors of weights
// per step, an accumulator each per token, keep enough loads in flight.
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_widen_row(const std::byte* w, std::size_t row_bytes, std::size_t k, const float* x,
                                            std::size_t ldx, float* y, std::size_t ldy, std::size_t r) {
  __m512 acc[NT][4];
  for (int t = 0; t < NT; ++t)
    for (int v = 0; v < 4; ++v) acc[t][v] = _mm512_setzero_ps();
  const std::byte* row = w + r * row_bytes;
  std::size_t kk = 0;
  for (; kk + 64 <= k; kk += 64) {
    __m512 wv[4];
    for (int v = 0; v < 4; ++v) wv[v] = Row::load(row, kk + 16 * static_cast<std::size_t>(v));
#pragma GCC unroll 8  // all NT accumulators in registers
    for (int t = 0; t < NT; ++t) {
      const float* xt = x + static_cast<std::size_t>(t) * ldx + kk;
      for (int v = 0; v < 4; ++v) acc[t][v] = _mm512_fmadd_ps(wv[v], _mm512_loadu_ps(xt + 16 * v), acc[t][v]);
    }
  }
  for (; kk < k; kk += 16) {
    const auto m = static_cast<__mmask16>(k - kk >= 16 ? 0xFFFF : (1u << (k - kk)) - 1);
    const __m512 wv = Row::load_tail(row, kk, m);
    for (int t = 0; t < NT; ++t)
      acc[t][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + static_cast<std::size_t>(t) * ldx + kk), acc[t][0]);
  }
  for (int t = 0; t < NT; ++t)
    y[static_cast<std::size_t>(t) * ldy + r] =
        hsum(_mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
}

// quantize_block, vectorised, with the same rounding (half away from zero).
STREAMLLM_AVX512 inline std::pair<float, std::int32_t> quantize_block_avx512(const float* v, std::int8_t* q) {
  const __m512 a = _mm512_loadu_ps(v), b = _mm512_loadu_ps(v + 16);
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  if ((_mm512_cmp_ps_mask(_mm512_abs_ps(a), big, _CMP_LE_OQ) & _mm512_cmp_ps_mask(_mm512_abs_ps(b), big, _CMP_LE_OQ)) != 0xFFFF)
    return non_finite_block(q);  // NaN or Inf
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.0f, id = quant::inverse_or_zero(d);
  const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f);
  const __m512 sa = _mm512_mul_ps(a, vid), sb = _mm512_mul_ps(b, vid);
  // v + copysign(0.5, v), truncated
  const __m512i qa = _mm512_cvttps_epi32(_mm512_add_ps(sa, _mm512_or_ps(half, _mm512_and_ps(sa, _mm512_set1_ps(-0.0f)))));
  const __m512i qb = _mm512_cvttps_epi32(_mm512_add_ps(sb, _mm512_or_ps(half, _mm512_and_ps(sb, _mm512_set1_ps(-0.0f)))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
  return {d, _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb))};
}

STREAMLLM_AVX512 inline void quantize_activations_avx512(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols,
                                                         QuantizedActivations& out) {
  quantize_activations_with(x, ldx, rows, cols, out, quantize_block_avx512);
}

// ---- Q8_0 / Q4_0 rows x int8 activations (VNNI) -------------------------------
//
// vpdpbusd multiplies unsigned by signed bytes, so weights are made unsigned:
// Q8_0 as q + 128, Q4_0 as its raw nibble (q + 8). The offset times the sum
// of the activation block is taken back by starting each of the block's 8
// int32 lanes from -offset * sum / 8 = -sum << kOffsetShift. Two blocks fill
// a zmm; each half is scaled by its own dw * dx.

STREAMLLM_AVX512 inline __m512 pair_ps(float a, float b) { return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1); }
STREAMLLM_AVX512 inline __m512i pair_epi32(std::int32_t a, std::int32_t b) {
  return _mm512_inserti32x8(_mm512_set1_epi32(a), _mm256_set1_epi32(b), 1);
}
STREAMLLM_AVX512 inline __m512 pair_f16(std::uint16_t a, std::uint16_t b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(a))),
                                                 _mm_set1_epi16(static_cast<short>(b)), 1));
}

// A pair of blocks as the VNNI kernel takes them: 64 unsigned quants, and
// each block's scale in its 8 lanes.
struct QuantsScales {
  __m512i u;
  __m512 d;
};

struct Q8_0Row {
  using Block = quant::BlockQ8_0;
  using Pairs = Q8_0Row;                  // the row type whose pair kernel takes the blocks past the last group
  static constexpr int kOffsetShift = 4;  // offset 128 = 8 lanes x 2^4
  static constexpr int kGroupShift = 7;   // one lane per block (batched kernel): 2^7
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  STREAMLLM_AVX512 static QuantsScales quants_scales_pair(const Block* b) { return {unsigned_pair(b), pair_f16(b[0].d, b[1].d)}; }
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]);
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += b.qs[j] * x[j];
    return s;
  }
};

// Byte and word indices for Q4_0Row: vpermb, vpsrlvw and vpermw operands.
struct Q4_0PairIndex {
  alignas(64) std::uint8_t quants[64];
  alignas(64) std::uint16_t shifts[32];
  alignas(64) std::uint16_t scales[32];
};
constexpr Q4_0PairIndex make_q4_0_pair_index() {
  Q4_0PairIndex x{};
  for (int i = 0; i < 64; ++i) x.quants[i] = static_cast<std::uint8_t>((i / 32) * 18 + 2 + i % 16);  // lanes: qs0 qs0 qs1 qs1
  for (int i = 0; i < 32; ++i) x.shifts[i] = static_cast<std::uint16_t>((i / 8) % 2 ? 4 : 0);        // low, high, low, high
  for (int i = 0; i < 32; ++i) x.scales[i] = static_cast<std::uint16_t>(i < 8 ? 0 : 9);              // words 0 and 9: d0, d1
  return x;
}

// Q4_0 blocks are 18 bytes (scale, then 16 bytes of nibbles: element j in
// the low nibble of byte j, element j + 16 in the high one). A pair is one
// masked 36-byte load; vpermb places each block's nibble bytes twice and a
// per-word shift picks low or high, so the 64 quants come out in element
// order with three operations, and vpermw gathers the two scales.
struct Q4_0Row {
  using Block = quant::BlockQ4_0;
  using Pairs = Q4_0Row;
  static constexpr int kOffsetShift = 0;  // offset 8 = 8 lanes x 2^0
  static constexpr int kGroupShift = 3;   // one lane per block (batched kernel): 2^3
  static constexpr Q4_0PairIndex kIndex = make_q4_0_pair_index();
  STREAMLLM_AVX512 static __m512i load_pair(const Block* b) {
    return _mm512_maskz_loadu_epi8(0xFFFFFFFFFull, b);  // 36 bytes; masked, so never past the end of the row
  }
  STREAMLLM_AVX512 static __m512i unsigned_pair(__m512i raw) {
    const __m512i q = _mm512_permutexvar_epi8(_mm512_load_si512(kIndex.quants), raw);
    return _mm512_and_si512(_mm512_srlv_epi16(q, _mm512_load_si512(kIndex.shifts)), _mm512_set1_epi8(0x0F));
  }
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) { return unsigned_pair(load_pair(b)); }
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]);
  STREAMLLM_AVX512 static QuantsScales quants_scales_pair(const Block* b) {
    const __m512i raw = load_pair(b);
    const __m512i d = _mm512_permutexvar_epi16(_mm512_load_si512(kIndex.scales), raw);
    return {unsigned_pair(raw), _mm512_cvtph_ps(_mm512_castsi512_si256(d))};
  }
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += ((b.qs[j] & 0x0F) - 8) * x[j] + ((b.qs[j] >> 4) - 8) * x[j + 16];
    return s;
  }
};

// One token's int8 activations, as the per-pair kernel reads them: held in
// registers across a row instead of recomputed from the Slice each step.
struct PairActivations {
  const std::int8_t* q;
  const float* d;
  const std::int32_t* sum;
};

// One pair of blocks (quants u, scales dw) against a token's pair `pair`,
// added to acc: dw * dx * (u . xq - offset * sum).
template <class Row>
STREAMLLM_AVX512 inline __m512 int8_pair(__m512 acc, __m512i u, __m512 dw, const PairActivations& x, std::size_t pair) {
  const __m512i xq = _mm512_loadu_si512(x.q + pair * 64);
  const __m512 xd = _mm512_load_ps(x.d + pair * 16);
  __m512i corr = _mm512_load_si512(x.sum + pair * 16);
  if constexpr (Row::kOffsetShift != 0) corr = _mm512_slli_epi32(corr, Row::kOffsetShift);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u, xq)), _mm512_mul_ps(dw, xd), acc);
}

// Row r, blocks [b_begin, b_end), against NT tokens of int8 activations;
// the sums are stored to y, or added to it when `accumulate`. Two pairs of
// blocks per step, each into its own accumulator, hide the dpbusd ->
// convert -> fma latency. b_begin is a multiple of 4; only the row's last
// range may end on an odd block.
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_int8_row(const std::byte* w, std::size_t row_bytes, const QuantizedActivations::Slice& xa,
                                           float* y, std::size_t ldy, std::size_t r, std::size_t b_begin, std::size_t b_end,
                                           bool accumulate) {
  using Block = typename Row::Block;
  const std::size_t nb = b_end;
  __m512 acc0[NT], acc1[NT];
  PairActivations x[NT];
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    acc0[t] = acc1[t] = _mm512_setzero_ps();
    x[t] = {xa.q_row(tt), xa.d_lanes_row(tt), xa.sum_lanes_row(tt)};
  }
  const std::byte* bytes = w + r * row_bytes;
  const Block* row = reinterpret_cast<const Block*>(bytes);
  std::size_t b = b_begin;
  for (; b + 4 <= nb; b += 4) {
    // A line prefetched per 64 bytes consumed keeps kPrefetchBytes in flight
    // (past this row's end: the next row follows in memory).
    if (kPrefetchInt8) prefetch_ahead(bytes + b * sizeof(Block) + kPrefetchBytes, 4 * sizeof(Block));
    const auto [u0, d0] = Row::quants_scales_pair(row + b);
    const auto [u1, d1] = Row::quants_scales_pair(row + b + 2);
#pragma GCC unroll 8  // all NT accumulators in registers
    for (int t = 0; t < NT; ++t) {
      acc0[t] = int8_pair<Row>(acc0[t], u0, d0, x[t], b / 2);
      acc1[t] = int8_pair<Row>(acc1[t], u1, d1, x[t], b / 2 + 1);
    }
  }
  if (b + 2 <= nb) {
    const auto [u0, d0] = Row::quants_scales_pair(row + b);
    for (int t = 0; t < NT; ++t) acc0[t] = int8_pair<Row>(acc0[t], u0, d0, x[t], b / 2);
    b += 2;
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    float s = hsum(_mm512_add_ps(acc0[t], acc1[t]));
    if (b < nb)  // an odd last block
      s += f16_to_f32(row[b].d) * xa.d_row(tt)[b] * static_cast<float>(Row::scalar_dot(row[b], xa.q_row(tt) + b * 32));
    y[tt * ldy + r] = accumulate ? y[tt * ldy + r] + s : s;
  }
}

// Float rows against NT tokens are read four at a time, one from each
// quarter of [r0, r1). One core keeps more lines in flight on four
// sequential streams, each prefetched 1 KiB ahead, than on one. Batched
// decode gains more: row after row, each row's longer arithmetic left the
// one stream idle. The prefetches ask for non-temporal lines (NTA): weights
// are read once per token, and on the Zen 5 that kept more of the streams
// in flight.
inline constexpr std::size_t kStreamPrefetchBytes = 1024;

STREAMLLM_AVX512 inline void prefetch_stream(const std::byte* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_NTA);
}

// The integer kernels of one token (Q8_0 / Q4_0 streams, K-quant rows) do
// more arithmetic per line than the float ones, so the lines they ask for
// must be asked for earlier: 4 KiB ahead instead of 1 (the float kernels
// gain nothing from more; an L2 hint was no different).
inline constexpr std::size_t kInt8PrefetchBytes = 4096;

// The streams' weights are loaded once per step and serve every token; a
// token's activations are loaded once per step for all the streams. One
// token keeps two chains per stream (8 in all) to cover the FMA latency;
// more tokens have one chain per stream and token, 8 to 16, in registers:
// so five to eight tokens read two streams. The rows left over past the
// equal parts go one after the other. (Slicing k so that 8 tokens'
// activations stay in L1, as the int8 kernels do, was within the noise.)
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_widen_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                             std::size_t k, const float* x, std::size_t ldx, float* y, std::size_t ldy) {
  constexpr std::size_t kStream = NT <= 4 ? 4 : 2, kStepBytes = 32 * Row::kBytes;
  constexpr int kChains = NT == 1 ? 2 : 1;
  const std::size_t q = (r1 - r0) / kStream, kend = k / 32 * 32;
  for (std::size_t i = 0; i < q; ++i) {
    const std::byte* row[kStream];
    __m512 acc[kStream][NT][kChains];
    for (std::size_t s = 0; s < kStream; ++s) {
      row[s] = w + (r0 + s * q + i) * row_bytes;
      for (int t = 0; t < NT; ++t)
        for (int c = 0; c < kChains; ++c) acc[s][t][c] = _mm512_setzero_ps();
    }
    for (std::size_t kk = 0; kk < kend; kk += 32) {
      __m512 w0[kStream], w1[kStream];
      for (std::size_t s = 0; s < kStream; ++s) {
        prefetch_stream(row[s] + kk * Row::kBytes + kStreamPrefetchBytes, kStepBytes);
        w0[s] = Row::load(row[s], kk);
        w1[s] = Row::load(row[s], kk + 16);
      }
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const float* xt = x + static_cast<std::size_t>(t) * ldx + kk;
        const __m512 x0 = _mm512_loadu_ps(xt), x1 = _mm512_loadu_ps(xt + 16);
        for (std::size_t s = 0; s < kStream; ++s) {
          acc[s][t][0] = _mm512_fmadd_ps(w0[s], x0, acc[s][t][0]);
          acc[s][t][kChains - 1] = _mm512_fmadd_ps(w1[s], x1, acc[s][t][kChains - 1]);
        }
      }
    }
    for (std::size_t kk = kend; kk < k; kk += 16) {
      const auto m = static_cast<__mmask16>(k - kk >= 16 ? 0xFFFF : (1u << (k - kk)) - 1);
      for (std::size_t s = 0; s < kStream; ++s) {
        const __m512 wv = Row::load_tail(row[s], kk, m);
        for (int t = 0; t < NT; ++t)
          acc[s][t][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + static_cast<std::size_t>(t) * ldx + kk), acc[s][t][0]);
      }
    }
    for (std::size_t s = 0; s < kStream; ++s)
      for (int t = 0; t < NT; ++t) {
        __m512 sum = acc[s][t][0];
        for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[s][t][c]);
        y[static_cast<std::size_t>(t) * ldy + r0 + s * q + i] = hsum(sum);
      }
  }
  for (std::size_t r = r0 + kStream * q; r < r1; ++r) gemv_widen_row<Row, NT>(w, row_bytes, k, x, ldx, y, ldy, r);
}

// ---- Decode by groups: one lane per block, 16 blocks at a time -------------
//
// The per-pair scaling above (convert, scale, add for every pair of blocks and
// token) costs more than the dot products, even for one token. Here the
// weights of 16 blocks are transposed once per row so that each lane belongs
// to one block, and the activations are interleaved to match
// (interleave_groups): eight vpdpbusd then finish 16 blocks' dot products for
// a token, and one convert + one fma scale them. The transpose is paid once
// for all the tokens. The per-pair kernel takes the blocks past the last group.

// a[i] = blocks 2i, 2i+1 (8 dwords each, as unsigned_pair loads them) becomes
// a[g] = dword g of the 16 blocks, lane L holding block group_lane_block(L).
// Three butterfly stages, each swapping a bit of the register index with the
// same bit of the lane index.
struct TransposeIndex {
  alignas(64) std::int32_t lo[3][16];
  alignas(64) std::int32_t hi[3][16];
};
constexpr TransposeIndex make_transpose_index() {
  TransposeIndex t{};
  for (int k = 0; k < 3; ++k)
    for (int l = 0; l < 16; ++l) {
      const int bit = 1 << k, from_second = (l & bit) ? 16 : 0;  // lanes with the bit set come from the partner
      t.lo[k][l] = from_second + (l & ~bit);
      t.hi[k][l] = from_second + (l | bit);
    }
  return t;
}
inline constexpr TransposeIndex kTransposeIndex = make_transpose_index();

STREAMLLM_AVX512 inline void transpose_blocks16(__m512i a[8]) {
  for (int k = 0; k < 3; ++k) {
    const int bit = 1 << k;
    const __m512i ilo = _mm512_load_si512(kTransposeIndex.lo[k]), ihi = _mm512_load_si512(kTransposeIndex.hi[k]);
    for (int p = 0; p < 8; ++p) {
      if (p & bit) continue;
      const __m512i x = a[p], y = a[p | bit];
      a[p] = _mm512_permutex2var_epi32(x, ilo, y);
      a[p | bit] = _mm512_permutex2var_epi32(x, ihi, y);
    }
  }
}

// interleave_group_quants, vectorised: the same transpose as the weights'.
STREAMLLM_AVX512 inline void interleave_group_quants_avx512(const std::int8_t* src, std::int8_t* dst) {
  __m512i a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_loadu_si512(src + 64 * i);
  transpose_blocks16(a);
  for (int g = 0; g < 8; ++g) _mm512_store_si512(dst + 64 * g, a[g]);
}

STREAMLLM_AVX512 inline void interleave_groups_avx512(QuantizedActivations& a, int shift) {
  interleave_groups_with(a, shift, interleave_group_quants_avx512);
}

// 16 blocks as the batched kernel takes them: wq[g] lane L holds quants
// 4g..4g+3 of block group_lane_block(L) (unsigned); returns the blocks'
// scales in the same lane order. Generic form: pairs loaded as the one-token
// kernel does, then transposed; Q4_0 has a direct one (Q4_0Row::load_group16).
template <class Row>
STREAMLLM_AVX512 inline __m512 load_group16_transposed(const typename Row::Block* blk, __m512i wq[8]) {
  for (int i = 0; i < 8; ++i) wq[i] = Row::unsigned_pair(blk + 2 * i);
  transpose_blocks16(wq);
  alignas(32) std::uint16_t dh[16];
  for (std::size_t l = 0; l < 16; ++l) dh[l] = blk[group_lane_block(l)].d;
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
}

// Byte and word indices for gathering 16 Q4_0 blocks (288 bytes, five
// registers) straight into that layout: for quad g, lane L takes nibble bytes
// 4g..4g+3 of its block; the sources are the register pairs (0,1) and (2,3)
// (vpermt2b, index mod 128) and register 4, merged by masks.
struct Q4_0GroupIndex {
  alignas(64) std::uint8_t quants[4][64];
  std::uint64_t from23[4], from4[4];
  alignas(64) std::uint16_t scales[32];
  std::uint32_t scales_from23, scales_from4;
};
constexpr Q4_0GroupIndex make_q4_0_group_index() {
  Q4_0GroupIndex x{};
  for (int g = 0; g < 4; ++g)
    for (int i = 0; i < 64; ++i) {
      const int offset = 18 * static_cast<int>(group_lane_block(static_cast<std::size_t>(i / 4))) + 2 + 4 * g + i % 4;
      x.quants[g][i] = static_cast<std::uint8_t>(offset % 128);
      if (offset >= 128 && offset < 256) x.from23[g] |= std::uint64_t(1) << i;
      if (offset >= 256) x.from4[g] |= std::uint64_t(1) << i;
    }
  for (int l = 0; l < 16; ++l) {
    const int word = 9 * static_cast<int>(group_lane_block(static_cast<std::size_t>(l)));
    x.scales[l] = static_cast<std::uint16_t>(word % 64);
    if (word >= 64 && word < 128) x.scales_from23 |= 1u << l;
    if (word >= 128) x.scales_from4 |= 1u << l;
  }
  return x;
}
inline constexpr Q4_0GroupIndex kQ4_0Group = make_q4_0_group_index();

STREAMLLM_AVX512 inline __m512 Q8_0Row::load_group16(const Block* b, __m512i wq[8]) {
  return load_group16_transposed<Q8_0Row>(b, wq);
}

STREAMLLM_AVX512 inline __m512 Q4_0Row::load_group16(const Block* b, __m512i wq[8]) {
  const auto* p = reinterpret_cast<const std::byte*>(b);
  const __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128),
                z3 = _mm512_loadu_si512(p + 192), z4 = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p + 256);
  const __m512i m = _mm512_set1_epi8(0x0F);
  for (int g = 0; g < 4; ++g) {
    const __m512i idx = _mm512_load_si512(kQ4_0Group.quants[g]);
    __m512i v = _mm512_permutex2var_epi8(z0, idx, z1);
    v = _mm512_mask_blend_epi8(kQ4_0Group.from23[g], v, _mm512_permutex2var_epi8(z2, idx, z3));
    v = _mm512_mask_blend_epi8(kQ4_0Group.from4[g], v, _mm512_permutexvar_epi8(idx, z4));
    wq[g] = _mm512_and_si512(v, m);
    wq[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
  }
  const __m512i idx = _mm512_load_si512(kQ4_0Group.scales);
  __m512i d = _mm512_permutex2var_epi16(z0, idx, z1);
  d = _mm512_mask_blend_epi16(kQ4_0Group.scales_from23, d, _mm512_permutex2var_epi16(z2, idx, z3));
  d = _mm512_mask_blend_epi16(kQ4_0Group.scales_from4, d, _mm512_permutexvar_epi16(idx, z4));
  return _mm512_cvtph_ps(_mm512_castsi512_si256(d));
}

// Rows interleaved at load (quant/interleaved.hpp): a group is plain loads.
// The blocks past the last group are as in the file, for the pair kernel.
struct Q8_0x16Row : Q8_0Row {
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]) {
    const auto* p = reinterpret_cast<const std::byte*>(b);
    for (int g = 0; g < 8; ++g) wq[g] = _mm512_loadu_si512(p + 64 * g);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 512)));
  }
};
struct Q4_0x16Row : Q4_0Row {
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]) {
    const auto* p = reinterpret_cast<const std::byte*>(b);
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {
      const __m512i v = _mm512_loadu_si512(p + 64 * g);
      wq[g] = _mm512_and_si512(v, m);
      wq[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256)));
  }
};

// quant::interleave_row, a group at a time through the kernels' own loads.
STREAMLLM_AVX512 inline void interleave_row_avx512(DType base, const std::byte* src, std::byte* dst, std::size_t cols) {
  const std::size_t block = quant::quant_bytes(base) + 2, group = quant::kGroupBlocks * block;
  const std::size_t groups = cols / 32 / quant::kGroupBlocks;
  for (std::size_t G = 0; G < groups; ++G) {
    const std::byte* in = src + G * group;
    std::byte* out = dst + G * group;
    __m512i wq[8];
    if (base == DType::Q8_0) {
      Q8_0Row::load_group16(reinterpret_cast<const quant::BlockQ8_0*>(in), wq);
      for (int g = 0; g < 8; ++g) _mm512_storeu_si512(out + 64 * g, wq[g]);
    } else {
      Q4_0Row::load_group16(reinterpret_cast<const quant::BlockQ4_0*>(in), wq);
      for (int g = 0; g < 4; ++g) _mm512_storeu_si512(out + 64 * g, _mm512_or_si512(wq[g], _mm512_slli_epi16(wq[g + 4], 4)));
    }
    for (std::size_t b = 0; b < quant::kGroupBlocks; ++b)
      std::memcpy(out + quant::group_scale_offset(base, b), in + b * block, 2);
  }
  std::memcpy(dst + groups * group, src + groups * group,
              static_cast<std::size_t>(row_bytes(base, static_cast<std::int64_t>(cols))) - groups * group);
}

// Row r, groups [g0, g1) of 16 blocks, against NT tokens; stores the sums,
// or adds them to y when `accumulate`.
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_int8_row_groups(const std::byte* w, std::size_t row_bytes,
                                                  const QuantizedActivations::Slice& xa, float* y, std::size_t ldy, std::size_t r,
                                                  std::size_t g0, std::size_t g1, bool accumulate) {
  using Block = typename Row::Block;
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const Block* row = reinterpret_cast<const Block*>(w + r * row_bytes);
  for (std::size_t G = g0; G < g1; ++G) {
    const Block* blk = row + 16 * G;
    // Two rows ahead, at the same column: where the kernel reads next when k
    // is sliced (kPrefetchBytes ahead would land in this row's next slice);
    // 2-4 KB ahead in the stream when k is whole (TinyLlama).
    if (kPrefetchInt8) prefetch_ahead(reinterpret_cast<const std::byte*>(blk) + 2 * row_bytes, 16 * sizeof(Block));
    __m512i wq[8];
    const __m512 dw = Row::load_group16(blk, wq);
    const std::int8_t* xq0 = xa.q16_group(G);
    const float* xd0 = xa.d16_group(G);
    const std::int32_t* xs0 = xa.sum16_group(G);
    // Dot products of the 8 quads, one chain per token, the tokens' chains
    // interleaved so that each step has NT independent vpdpbusd; one token
    // gets two chains, so that 8 vpdpbusd in a row do not wait on each other.
    constexpr int kChains = NT == 1 ? 2 : 1;
    __m512i sum[NT][kChains];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      sum[t][0] = _mm512_load_si512(xs0 + static_cast<std::size_t>(t) * 16);
      if constexpr (kChains == 2) sum[t][1] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        sum[t][g % kChains] =
            _mm512_dpbusd_epi32(sum[t][g % kChains], wq[g],
                                _mm512_load_si512(xq0 + static_cast<std::size_t>(t) * 512 + 64 * static_cast<std::size_t>(g)));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      if constexpr (kChains == 2) sum[t][0] = _mm512_add_epi32(sum[t][0], sum[t][1]);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t][0]),
                               _mm512_mul_ps(dw, _mm512_load_ps(xd0 + static_cast<std::size_t>(t) * 16)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    float& out = y[static_cast<std::size_t>(t) * ldy + r];
    out = accumulate ? out + hsum(acc[t]) : hsum(acc[t]);
  }
}

// Calls f.template operator()<NT>() for NT = nt (1..8), in code compiled for AVX-512.
template <class F>
STREAMLLM_AVX512 inline void with_tokens8(std::size_t nt, F&& f) {
  with_count<8>(nt, std::forward<F>(f));
}

// One token against rows [r0, r1) in groups of 16 blocks, read as kStream
// sequential streams (the rows of kStream equal parts of the range, side by
// side), each prefetched ahead (kInt8PrefetchBytes), as the float kernels do:
// one core keeps more lines in flight than on one stream (four, as the
// float kernels: eight were no faster, and leave more rows over). Each
// group's activations are loaded once for all the streams. The blocks past the last group and the
// rows past the equal parts go to the kernels above.
template <class Row, std::size_t kStream = 4>
STREAMLLM_AVX512 inline void gemv_int8_streams(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                               const QuantizedActivations* xa, float* y) {
  using Block = typename Row::Block;
  constexpr std::size_t kGroupBytes = 16 * sizeof(Block);
  const QuantizedActivations::Slice xs = xa->slice(0);
  const std::size_t groups = xa->groups, q = (r1 - r0) / kStream;
  for (std::size_t i = 0; i < q; ++i) {
    const std::byte* row[kStream];
    __m512 acc[kStream];
    for (std::size_t s = 0; s < kStream; ++s) {
      row[s] = w + (r0 + s * q + i) * row_bytes;
      acc[s] = _mm512_setzero_ps();
    }
    for (std::size_t G = 0; G < groups; ++G) {
      const std::int8_t* xq = xs.q16_group(G);
      const __m512 xd = _mm512_load_ps(xs.d16_group(G));
      const __m512i xsum = _mm512_load_si512(xs.sum16_group(G));
#pragma GCC unroll 8
      for (std::size_t s = 0; s < kStream; ++s) {
        const std::byte* group = row[s] + G * kGroupBytes;
        prefetch_ahead(group + kInt8PrefetchBytes, kGroupBytes);
        __m512i wq[8];
        const __m512 dw = Row::load_group16(reinterpret_cast<const Block*>(group), wq);
        __m512i even = xsum, odd = _mm512_setzero_si512();  // two chains: 8 vpdpbusd in a row
#pragma GCC unroll 8
        for (int g = 0; g < 8; g += 2) {
          even = _mm512_dpbusd_epi32(even, wq[g], _mm512_load_si512(xq + 64 * g));
          odd = _mm512_dpbusd_epi32(odd, wq[g + 1], _mm512_load_si512(xq + 64 * g + 64));
        }
        acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), _mm512_mul_ps(dw, xd), acc[s]);
      }
    }
    for (std::size_t s = 0; s < kStream; ++s) y[r0 + s * q + i] = hsum(acc[s]);
  }
  for (std::size_t r = r0 + kStream * q; r < r1; ++r) gemv_int8_row_groups<Row, 1>(w, row_bytes, xs, y, 0, r, 0, groups, false);
  if (16 * groups < xa->blocks)
    for (std::size_t r = r0; r < r1; ++r)
      gemv_int8_row<typename Row::Pairs, 1>(w, row_bytes, xs, y, 0, r, 16 * groups, xa->blocks, groups > 0);
}

// Rows [r0, r1) against n tokens of int8 activations. Each row once for up
// to 8 tokens (it stays in L1 for them), groups of 16 blocks by the kernel
// above, the remaining blocks by the per-pair one. One token goes this way
// too: per 16 blocks, one convert and one fma instead of eight of each.
// Every row reads all
// the tokens' activations, so they must stay in L1 too: long rows (the 5632
// columns of w_down: 56 KB for 8 tokens) go in slices of k, each slice over
// all the rows, which wait in L2 for the next one; so do the rows for the
// next 8 tokens.
template <class Row>
STREAMLLM_AVX512 inline void gemv_int8_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                            const QuantizedActivations* xa, std::size_t n, float* y, std::size_t ldy) {
  if (n == 1) return gemv_int8_streams<Row>(r0, r1, w, row_bytes, xa, y);
  const std::size_t nb = xa->blocks, groups = xa->groups, grouped = 16 * groups;
  constexpr std::size_t kActivationBytes = 24 << 10, kGroupBytes = 512 + 2 * 16 * 4;
  for (std::size_t t0 = 0; t0 < n; t0 += 8) {  // past 8 tokens, the rows come again from L2
    const std::size_t nt = std::min<std::size_t>(8, n - t0),
                      slice = std::max<std::size_t>(1, kActivationBytes / (nt * kGroupBytes));
    const QuantizedActivations::Slice xs = xa->slice(t0);
    for (std::size_t g0 = 0; g0 < groups; g0 += slice)
      for (std::size_t r = r0; r < r1; ++r)
        with_tokens8(nt, [&]<int NT>() {
          gemv_int8_row_groups<Row, NT>(w, row_bytes, xs, y + t0 * ldy, ldy, r, g0, std::min(groups, g0 + slice), g0 > 0);
        });
  }
  if (grouped < nb)
    for (std::size_t r = r0; r < r1; ++r)
      for (std::size_t t0 = 0; t0 < n; t0 += 8)
        with_tokens8(std::min<std::size_t>(8, n - t0), [&]<int NT>() {
          gemv_int8_row<typename Row::Pairs, NT>(w, row_bytes, xa->slice(t0), y + t0 * ldy, ldy, r, grouped, nb, groups > 0);
        });
}

// ---- K-quants x int8 activations (VNNI) ------------------------------------------
//
// A super-block's quants made unsigned bytes in element order, four vectors of
// 64, for vpdpbusd against the token's int8 activations; each int32 lane (4
// elements) is then scaled by its sub-block's scale times its activation
// block's scale (d_lanes: 8 lanes per block of 32).
// Q4_K: x = d sc q - dmin m, q in [0, 16): the mins' part is, per sub-block,
// dmin m times the activation block's d * sum, eight per super-block. Q5_K
// is Q4_K with q in [0, 32).
// Q6_K: x = d sc (q - 32), q in [0, 64), sub-blocks of 16 (four lanes): the
// offset is taken back per lane, 32 times the sum of its 4 activations.

// The 8 scales (times d, in lanes 0-7) and mins (times dmin) of a Q4_K or
// Q5_K block, from their 6-bit packing.
template <class Block>
STREAMLLM_AVX512 inline void q4k_scales_mins(const Block& b, __m512& scales, __m256& mins) {
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
  const __m128i sc = _mm_cvtsi64_si128(static_cast<long long>(p.scales)), m = _mm_cvtsi64_si128(static_cast<long long>(p.mins));
  scales = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
  mins = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)));
}

// Q4_K quants: chunk c of 32 bytes holds elements 64c + [0, 32) in its low
// nibbles and 64c + [32, 64) in its high ones.
STREAMLLM_AVX512 inline void q4k_quants(const std::uint8_t* qs, __m512i q[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int p = 0; p < 2; ++p) {
    const __m512i a = _mm512_loadu_si512(qs + 64 * p);  // chunks 2p, 2p + 1
    const __m512i lo = _mm512_and_si512(a, m4), hi = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
    q[2 * p] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    q[2 * p + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  }
}

// Q5_K quants: Q4_K's nibbles plus 16 where the fifth bit is set, bit 2c of
// qh[l] for element 64c + l and bit 2c + 1 for 64c + 32 + l.
STREAMLLM_AVX512 inline void q5k_quants(const quant::BlockQ5K& b, __m512i q[4]) {
  q4k_quants(b.qs, q);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  const __m512i h2 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);  // bit 2c: both halves
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int c = 0; c < 4; ++c)
    q[c] =
        _mm512_mask_add_epi8(q[c], _mm512_test_epi8_mask(h2, _mm512_set1_epi8(static_cast<char>(1 << (2 * c)))), q[c], sixteen);
}

// Q6_K quants (q + 32): half n holds elements 128n + [0, 128): ql's 64 bytes
// give the low 4 bits (low nibbles: the first 64, high: the next), qh's 32
// bytes the top 2 (bit pairs 0, 1, 2, 3 for its four runs of 32).
STREAMLLM_AVX512 inline void q6k_quants(const quant::BlockQ6K& b, __m512i q[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
  for (int n = 0; n < 2; ++n) {
    const __m512i a = _mm512_loadu_si512(b.ql + 64 * n);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * n));
    const __m512i h2 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
    q[2 * n] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi16(_mm512_and_si512(h2, m2), 4));
    q[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h2, 4), m2), 4));
  }
}

// Lane l of vector v of a super-block lies in Q4_K / Q5_K sub-block 2v + l / 8
// and in Q6_K sub-block 4v + l / 4: the scale each lane takes.
STREAMLLM_AVX512 inline __m512i kquant_lane_scale_index(DType t, int v) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return t != DType::Q6_K ? _mm512_add_epi32(_mm512_set1_epi32(2 * v), _mm512_srli_epi32(lane, 3))
                          : _mm512_add_epi32(_mm512_set1_epi32(4 * v), _mm512_srli_epi32(lane, 2));
}

// Row r of a K-quant matrix against NT tokens' int8 activations; index[v]
// is kquant_lane_scale_index(T, v). The type is a template parameter, so the
// block's size is known: its prefetches are unrolled instead of a loop with
// a branch per block, and the choice of type is made once per call.
template <DType T, int NT>
STREAMLLM_AVX512 inline void gemv_kquant_int8_row(const std::byte* w, std::size_t row_bytes, const QuantizedActivations& xa,
                                                  const __m512i (&index)[4], float* y, std::size_t ldy, std::size_t r) {
  constexpr bool q4k = T != DType::Q6_K;  // Q4_K or Q5_K: affine, sub-blocks of 32
  using Block = std::conditional_t<T == DType::Q4_K, quant::BlockQ4K, std::conditional_t<q4k, quant::BlockQ5K, quant::BlockQ6K>>;
  const __m512i offset = _mm512_set1_epi8(32);
  // Two accumulators a token (even and odd vectors of a super-block): one
  // would chain four FMA latencies per super-block, which one token's Q4_K
  // waits on.
  __m512 acc[NT][2];
  __m256 min_acc[NT];
  for (int j = 0; j < NT; ++j) {
    acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    min_acc[j] = _mm256_setzero_ps();
  }
  const std::byte* row = w + r * row_bytes;
  for (std::size_t sb = 0; sb < xa.cols / 256; ++sb) {
    const auto& b = *reinterpret_cast<const Block*>(row + sb * sizeof(Block));
    prefetch_ahead(row + sb * sizeof(Block) + kInt8PrefetchBytes, sizeof(Block));
    __m512i q[4];
    __m512 scales;
    __m256 mins = _mm256_setzero_ps();
    if constexpr (q4k) {
      q4k_scales_mins(b, scales, mins);
      if constexpr (T == DType::Q4_K)
        q4k_quants(b.qs, q);
      else
        q5k_quants(b, q);
    } else {
      scales =
          _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)),
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)))));
      q6k_quants(b, q);
    }
    for (int j = 0; j < NT; ++j) {
      const std::int8_t* xq = xa.q_row(static_cast<std::size_t>(j)) + 256 * sb;
      const float* xd = xa.d_lanes_row(static_cast<std::size_t>(j)) + 64 * sb;  // 4 pairs of blocks
      for (int v = 0; v < 4; ++v) {
        const __m512i x = _mm512_loadu_si512(xq + 64 * v);
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[v], x);
        if constexpr (!q4k) dot = _mm512_sub_epi32(dot, _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, x));
        const __m512 scale = _mm512_mul_ps(_mm512_permutexvar_ps(index[v], scales), _mm512_load_ps(xd + 16 * v));
        acc[j][v % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[j][v % 2]);
      }
      if constexpr (q4k) {
        min_acc[j] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xa.dsum_row(static_cast<std::size_t>(j)) + 8 * sb), min_acc[j]);
      }
    }
  }
  // The mins' eight lanes are taken from the sums before the one horizontal
  // sum a row needs (rows of 2048 are only 8 super-blocks).
  for (int j = 0; j < NT; ++j)
    y[static_cast<std::size_t>(j) * ldy + r] =
        hsum(_mm512_sub_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_zextps256_ps512(min_acc[j])));
}

template <int NT>
STREAMLLM_AVX512 inline void gemv_kquant_int8_rows(DType t, std::size_t r0, std::size_t r1, const std::byte* w,
                                                   std::size_t row_bytes, const QuantizedActivations& xa, float* y,
                                                   std::size_t ldy) {
  const __m512i index[4] = {kquant_lane_scale_index(t, 0), kquant_lane_scale_index(t, 1), kquant_lane_scale_index(t, 2),
                            kquant_lane_scale_index(t, 3)};
  if (t == DType::Q4_K)
    for (std::size_t r = r0; r < r1; ++r) gemv_kquant_int8_row<DType::Q4_K, NT>(w, row_bytes, xa, index, y, ldy, r);
  else if (t == DType::Q5_K)
    for (std::size_t r = r0; r < r1; ++r) gemv_kquant_int8_row<DType::Q5_K, NT>(w, row_bytes, xa, index, y, ldy, r);
  else
    for (std::size_t r = r0; r < r1; ++r) gemv_kquant_int8_row<DType::Q6_K, NT>(w, row_bytes, xa, index, y, ldy, r);
}

// ---- BF16 tiled matrix-matrix (prefill) ----------------------------------------
//
// Tokens along the lanes as bf16 pairs: a packed group holds, for each pair
// of k, 32 tokens x (x[k], x[k+1]). Weight rows are read as bf16 pairs,
// broadcast, and vdpbf16ps adds w[k]x[k] + w[k+1]x[k+1] into each token's lane.

inline constexpr std::size_t kBf16Tok = 32;   // tokens per micro-tile (two zmm)
inline constexpr std::size_t kBf16Rows = 12;  // weight rows per micro-tile: 24 accumulators

template <std::size_t MR>
STREAMLLM_AVX512 inline void gemm_bf16_micro(const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp, std::size_t kc,
                                             float* c, std::size_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  for (std::size_t i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (std::size_t kk = 0; kk < kc; kk += 2) {
    const __m512bh x0 = (__m512bh)_mm512_load_si512(xp + kk * kBf16Tok);
    const __m512bh x1 = (__m512bh)_mm512_load_si512(xp + kk * kBf16Tok + 32);
    for (std::size_t i = 0; i < MR; ++i) {
      std::int32_t pair;
      std::memcpy(&pair, w + i * ldw + kk, 4);
      const __m512bh wb = (__m512bh)_mm512_set1_epi32(pair);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], x0, wb);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], x1, wb);
    }
  }
  for (std::size_t i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

template <std::size_t... MR>
STREAMLLM_AVX512 inline void gemm_bf16_micro_rows(std::size_t rows, const std::uint16_t* w, std::size_t ldw,
                                                  const std::uint16_t* xp, std::size_t kc, float* c, std::size_t ldc,
                                                  bool accumulate, std::index_sequence<MR...>) {
  ((rows == MR + 1 ? gemm_bf16_micro<MR + 1>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
}

// n floats -> bf16 (round to nearest even).
STREAMLLM_AVX512 inline void f32_to_bf16_row(const float* src, std::size_t n, std::uint16_t* dst) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// Group g of x [n][ldx] (k even) -> 32 tokens as bf16 pairs [group][k/2][32][2]:
// each token row to bf16, then pairs (as 32-bit words) transposed in tiles.
inline void pack_group_bf16(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint16_t* xp, std::size_t g) {
  static thread_local AlignedVector<std::uint16_t> rows;
  std::uint16_t* tmp = grow(rows, kBf16Tok * k);
  const std::size_t valid = std::min(kBf16Tok, n - g * kBf16Tok);
  for (std::size_t t = 0; t < valid; ++t) f32_to_bf16_row(x + (g * kBf16Tok + t) * ldx, k, tmp + t * k);
  auto* dst = reinterpret_cast<std::uint32_t*>(xp) + g * (k / 2) * kBf16Tok;
  transpose(reinterpret_cast<const std::uint32_t*>(tmp), k / 2, valid, k / 2, dst, kBf16Tok);
  for (std::size_t p = 0; p < k / 2; ++p)
    for (std::size_t t = valid; t < kBf16Tok; ++t) dst[p * kBf16Tok + t] = 0;
}

// n halves -> f32.
STREAMLLM_AVX512 inline void f16_to_f32_row(const std::uint16_t* src, std::size_t n, float* dst) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// bf16 -> f32 is exact: the bits moved to the high half of a word.
STREAMLLM_AVX512 inline void bf16_to_f32_row(const std::uint16_t* src, std::size_t n, float* dst) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(
                                  _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))), 16)));
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// `cols` elements of a row to f32 where a vector converter exists (F16,
// BF16: the f32 tiles' rows); false for the others.
STREAMLLM_AVX512 inline bool dequantize_row_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  switch (t) {
    case DType::F16: f16_to_f32_row(reinterpret_cast<const std::uint16_t*>(src), cols, dst); return true;
    case DType::BF16: bf16_to_f32_row(reinterpret_cast<const std::uint16_t*>(src), cols, dst); return true;
    default: return false;
  }
}

// 16 x 16 floats transposed in registers (unpack, then 128-bit lane shuffles).
STREAMLLM_AVX512 inline void transpose16x16(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + static_cast<std::size_t>(i) * src_ld);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4)
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + j + 2] = _mm512_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // r[4q + c] now holds, in each 128-bit lane L, column 4L + c' of rows 4q..4q+3
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], _MM_SHUFFLE(2, 0, 2, 0));
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], _MM_SHUFFLE(3, 1, 3, 1));
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], _MM_SHUFFLE(2, 0, 2, 0));
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], _MM_SHUFFLE(3, 1, 3, 1));
  }
  static constexpr int order[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
  for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + static_cast<std::size_t>(c) * dst_ld, r[order[c]]);
}

// dst[j][i] = src[i][j], 16 x 16 blocks in registers, the edges element by element.
// Along dst's rows first: the tiles' results (dst: y, tokens x outputs, in
// memory) are written a row's run of lines at a time, not one line in each of
// 16 rows per step, which took a larger share of a prefill.
STREAMLLM_AVX512 inline void transpose_f32(const float* src, std::size_t src_ld, std::size_t rows, std::size_t cols, float* dst,
                                           std::size_t dst_ld) {
  const std::size_t R = rows / 16 * 16, C = cols / 16 * 16;
  for (std::size_t j = 0; j < C; j += 16)
    for (std::size_t i = 0; i < R; i += 16) transpose16x16(src + i * src_ld + j, src_ld, dst + j * dst_ld + i, dst_ld);
  if (R < rows) transpose(src + R * src_ld, src_ld, rows - R, cols, dst + R, dst_ld);
  if (C < cols) transpose(src + C, src_ld, R, cols - C, dst + C * dst_ld, dst_ld);
}

// What the AVX-512 tile policies share: results come back to token-major
// order through 16 x 16 register transposes.
struct TransposeBack {
  static void unpack(const float* yt, std::size_t ld, std::size_t rows, std::size_t n, float* y, std::size_t ldy) {
    transpose_f32(yt, ld, rows, n, y, ldy);
  }
};

// The f32 tiles (gemm.hpp) with tokens packed and results unpacked by the
// register transposes: element by element, the two transposes took a tenth
// of an F16 prefill (TinyLlama, 512 tokens, one thread).
struct GemmF32Transposed : GemmF32, TransposeBack {
  using TransposeBack::unpack;
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, float* xp, std::size_t g) {
    pack_group_by(transpose_f32, x, ldx, n, k, xp, g);
  }
};

// The bf16 tile policy of the shared gemm driver (gemm.hpp).
struct GemmBf16 : TransposeBack {
  using Packed = std::uint16_t;
  using Weight = std::uint16_t;
  static constexpr std::size_t kTok = kBf16Tok;
  static constexpr std::size_t kRows = kBf16Rows;
  // A token slice of 512 k x 32 tokens x 2 B = 32 KB stays in L1 (48 KB);
  // a weight block of 192 rows x 512 x 2 B = 192 KB in L2 (1 MB). 512 is a
  // multiple of every block size (32, 256), so blocks convert whole.
  static constexpr std::size_t kKc = 256;
  static constexpr std::size_t kMc = 16 * kRows;

  static std::size_t packed_size(std::size_t k) { return k * kTok; }
  static std::size_t packed_offset(std::size_t k0) { return k0 * kTok; }
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint16_t* xp, std::size_t g) {
    pack_group_bf16(x, ldx, n, k, xp, g);
  }
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp, std::size_t kc,
                         float* c, std::size_t ldc, bool accumulate, std::index_sequence<MR...> seq) {
    gemm_bf16_micro_rows(rows, w, ldw, xp, kc, c, ldc, accumulate, seq);
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif
