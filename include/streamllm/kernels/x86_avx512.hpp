// AVX-512 kernels for the typed weights: F16/BF16 rows widened to f32,
// Q8_0/Q4_0 rows multiplied with int8 activations by VNNI (vpdpbusd), and a
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
#include <utility>

#include "streamllm/dtype.hpp"
#include "streamllm/kernels/activations_q8.hpp"
#include "streamllm/quant/blocks.hpp"

#define STREAMLLM_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16")))

// GCC 12's AVX-512 intrinsics start some results from a self-initialised
// "undefined" register, which -Wuninitialized reports wherever they are
// inlined (GCC bug 105593, fixed in GCC 13). The kernels below initialise
// everything they read.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define STREAMLLM_POP_DIAGNOSTICS
#endif

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

// ---- F16 / BF16 rows, widened to f32 (exact activations) ------------------------

struct F16Row {
  STREAMLLM_AVX512 static __m512 load(const std::byte* row, std::size_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  STREAMLLM_AVX512 static __m512 load_tail(const std::byte* row, std::size_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  }
};

struct BF16Row {
  STREAMLLM_AVX512 static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  STREAMLLM_AVX512 static __m512 load(const std::byte* row, std::size_t k) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  STREAMLLM_AVX512 static __m512 load_tail(const std::byte* row, std::size_t k, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, row + 2 * k));
  }
};

// R rows from row r, against NT tokens: y[t][r + i] = W[r + i] . x[t].
template <class Row, int R, int NT>
STREAMLLM_AVX512 inline void gemv_widen_rows(const std::byte* w, std::size_t row_bytes, std::size_t k,
                                             const float* x, std::size_t ldx, float* y, std::size_t ldy,
                                             std::size_t r) {
  __m512 acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const std::byte* rows = w + r * row_bytes;
  std::size_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    __m512 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_loadu_ps(x + static_cast<std::size_t>(t) * ldx + kk);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = Row::load(rows + static_cast<std::size_t>(i) * row_bytes, kk);
      for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  if (kk < k) {
    const auto m = static_cast<__mmask16>((1u << (k - kk)) - 1);
    __m512 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + static_cast<std::size_t>(t) * ldx + kk);
    for (int i = 0; i < R; ++i) {
      const __m512 wv = Row::load_tail(rows + static_cast<std::size_t>(i) * row_bytes, kk, m);
      for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) y[static_cast<std::size_t>(t) * ldy + r + static_cast<std::size_t>(i)] = hsum(acc[i][t]);
}

// ---- Q8_0 / Q4_0 rows x int8 activations (VNNI) -------------------------------
//
// vpdpbusd multiplies unsigned by signed bytes, so weights are made unsigned:
// Q8_0 as q + 128, Q4_0 as its raw nibble (q + 8). The offset times the sum
// of the activation block is taken back by starting each int32 lane from
// -offset * sum / 8 (8 lanes per block of 32). Two blocks fill a zmm; each
// half is scaled by its own dw * dx.

STREAMLLM_AVX512 inline __m512 pair_ps(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}
STREAMLLM_AVX512 inline __m512i pair_epi32(std::int32_t a, std::int32_t b) {
  return _mm512_inserti32x8(_mm512_set1_epi32(a), _mm256_set1_epi32(b), 1);
}
STREAMLLM_AVX512 inline __m512 pair_f16(std::uint16_t a, std::uint16_t b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(a))),
                                                 _mm_set1_epi16(static_cast<short>(b)), 1));
}

struct Q8_0Row {
  using Block = quant::BlockQ8_0;
  static constexpr std::int32_t kOffsetPerLane = 16;  // 128 / 8
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) {
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += b.qs[j] * x[j];
    return s;
  }
};

struct Q4_0Row {
  using Block = quant::BlockQ4_0;
  static constexpr std::int32_t kOffsetPerLane = 1;  // 8 / 8
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[0].qs))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[1].qs)), 1);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // lo0 lo1 hi0 hi1
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));              // lo0 hi0 lo1 hi1
  }
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += ((b.qs[j] & 0x0F) - 8) * x[j] + ((b.qs[j] >> 4) - 8) * x[j + 16];
    return s;
  }
};

template <class Row, int R, int NT>
STREAMLLM_AVX512 inline void gemv_int8_rows(const std::byte* w, std::size_t row_bytes, const QuantizedActivations& xa,
                                            float* y, std::size_t ldy, std::size_t r) {
  using Block = typename Row::Block;
  const std::size_t nb = xa.blocks;
  __m512 acc[R][NT];
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const Block* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = reinterpret_cast<const Block*>(w + (r + static_cast<std::size_t>(i)) * row_bytes);
  std::size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m512i xq[NT], corr[NT];
    __m512 xd[NT];
    for (int t = 0; t < NT; ++t) {
      const auto tt = static_cast<std::size_t>(t);
      xq[t] = _mm512_loadu_si512(xa.q_row(tt) + b * 32);
      xd[t] = pair_ps(xa.d_row(tt)[b], xa.d_row(tt)[b + 1]);
      corr[t] = pair_epi32(-Row::kOffsetPerLane * xa.sum_row(tt)[b], -Row::kOffsetPerLane * xa.sum_row(tt)[b + 1]);
    }
    for (int i = 0; i < R; ++i) {
      const Block* blk = rows[i] + b;
      _mm_prefetch(reinterpret_cast<const char*>(blk + 16), _MM_HINT_T0);
      const __m512i u = Row::unsigned_pair(blk);
      const __m512 dw = pair_f16(blk[0].d, blk[1].d);
      for (int t = 0; t < NT; ++t)
        acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr[t], u, xq[t])), _mm512_mul_ps(dw, xd[t]), acc[i][t]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      const auto tt = static_cast<std::size_t>(t);
      float s = hsum(acc[i][t]);
      if (b < nb)  // an odd last block
        s += f16_to_f32(rows[i][b].d) * xa.d_row(tt)[b] * static_cast<float>(Row::scalar_dot(rows[i][b], xa.q_row(tt) + b * 32));
      y[tt * ldy + r + static_cast<std::size_t>(i)] = s;
    }
}

// Rows [r0, r1) in groups of 4, then one by one.
template <template <class, int, int> class Kernel, class Row, int NT, class... Args>
inline void gemv_rows(std::size_t r0, std::size_t r1, Args&&... args) {
  std::size_t r = r0;
  for (; r + 4 <= r1; r += 4) Kernel<Row, 4, NT>::run(args..., r);
  for (; r < r1; ++r) Kernel<Row, 1, NT>::run(args..., r);
}

template <class Row, int R, int NT>
struct WidenKernel {
  STREAMLLM_AVX512 static void run(const std::byte* w, std::size_t row_bytes, std::size_t k, const float* x,
                                   std::size_t ldx, float* y, std::size_t ldy, std::size_t r) {
    gemv_widen_rows<Row, R, NT>(w, row_bytes, k, x, ldx, y, ldy, r);
  }
};
template <class Row, int R, int NT>
struct Int8Kernel {
  STREAMLLM_AVX512 static void run(const std::byte* w, std::size_t row_bytes, const QuantizedActivations* xa,
                                   float* y, std::size_t ldy, std::size_t r) {
    gemv_int8_rows<Row, R, NT>(w, row_bytes, *xa, y, ldy, r);
  }
};

// ---- BF16 tiled matrix-matrix (prefill) ----------------------------------------
//
// Tokens along the lanes as bf16 pairs: a packed group holds, for each pair
// of k, 32 tokens x (x[k], x[k+1]). Weight rows are read as bf16 pairs,
// broadcast, and vdpbf16ps adds w[k]x[k] + w[k+1]x[k+1] into each token's lane.

inline constexpr std::size_t kBf16Tok = 32;  // tokens per micro-tile (two zmm)
inline constexpr std::size_t kBf16Rows = 12; // weight rows per micro-tile: 24 accumulators

template <std::size_t MR>
STREAMLLM_AVX512 inline void gemm_bf16_micro(const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp,
                                             std::size_t kc, float* c, std::size_t ldc, bool accumulate) {
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
                                                  const std::uint16_t* xp, std::size_t kc, float* c,
                                                  std::size_t ldc, bool accumulate, std::index_sequence<MR...>) {
  ((rows == MR + 1 ? gemm_bf16_micro<MR + 1>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
}

// x [n][ldx] (k even) -> groups of 32 tokens as bf16 pairs [group][k/2][32][2].
STREAMLLM_AVX512 inline void pack_tokens_bf16(const float* x, std::size_t ldx, std::size_t n, std::size_t k,
                                              std::uint16_t* xp) {
  const std::size_t groups = (n + kBf16Tok - 1) / kBf16Tok;
  auto* out = reinterpret_cast<std::uint32_t*>(xp);
  for (std::size_t g = 0; g < groups; ++g) {
    std::uint32_t* dst = out + g * (k / 2) * kBf16Tok;
    for (std::size_t t = 0; t < kBf16Tok; ++t) {
      const std::size_t tok = g * kBf16Tok + t;
      if (tok >= n) {
        for (std::size_t p = 0; p < k / 2; ++p) dst[p * kBf16Tok + t] = 0;
        continue;
      }
      const float* src = x + tok * ldx;
      std::size_t p = 0;
      for (; p + 16 <= k / 2; p += 16) {  // 32 floats -> 16 bf16 pairs, scattered 32 tokens apart
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 2 * p + 16), _mm512_loadu_ps(src + 2 * p));
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(static_cast<int>(kBf16Tok)));
        _mm512_i32scatter_epi32(dst + p * kBf16Tok + t, idx, (__m512i)h, 4);
      }
      for (; p < k / 2; ++p)
        dst[p * kBf16Tok + t] = static_cast<std::uint32_t>(f32_to_bf16(src[2 * p])) |
                                static_cast<std::uint32_t>(f32_to_bf16(src[2 * p + 1])) << 16;
    }
  }
}

// n floats -> bf16 (round to nearest even).
STREAMLLM_AVX512 inline void f32_to_bf16_row(const float* src, std::size_t n, std::uint16_t* dst) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// n halves -> f32.
STREAMLLM_AVX512 inline void f16_to_f32_row(const std::uint16_t* src, std::size_t n, float* dst) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// One row of `cols` elements (whole blocks) of a quantised or f16 type to
// bf16, vectorised for the types prefill meets most (Q8_0, Q4_0).
STREAMLLM_AVX512 inline void dequantize_row_bf16(DType t, const std::byte* src, std::size_t cols,
                                                 std::uint16_t* dst, float* tmp) {
  if (t == DType::Q8_0) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(src);
    for (std::size_t i = 0; i < cols / 32; ++i) {
      const __m512 d = _mm512_set1_ps(f16_to_f32(b[i].d));
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
      const __m512 lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))));
      const __m512 hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))));
      _mm512_storeu_si512(dst + 32 * i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
    return;
  }
  if (t == DType::Q4_0) {
    const auto* b = reinterpret_cast<const quant::BlockQ4_0*>(src);
    const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (std::size_t i = 0; i < cols / 32; ++i) {
      const __m512 d = _mm512_set1_ps(f16_to_f32(b[i].d));
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, m), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight);
      const __m512 flo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)));
      const __m512 fhi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)));
      _mm512_storeu_si512(dst + 32 * i, (__m512i)_mm512_cvtne2ps_pbh(fhi, flo));
    }
    return;
  }
  quant::dequantize_row(t, src, static_cast<std::int64_t>(cols), tmp);
  f32_to_bf16_row(tmp, cols, dst);
}

// The bf16 tile policy of the shared gemm driver (gemm.hpp).
struct GemmBf16 {
  using Packed = std::uint16_t;
  using Weight = std::uint16_t;
  static constexpr std::size_t kTok = kBf16Tok;
  static constexpr std::size_t kRows = kBf16Rows;
  // A token slice of 512 k x 32 tokens x 2 B = 32 KB stays in L1 (48 KB);
  // a weight block of 192 rows x 512 x 2 B = 192 KB in L2 (1 MB). 512 is a
  // multiple of every block size (32, 256), so blocks convert whole.
  static constexpr std::size_t kKc = 512;
  static constexpr std::size_t kMc = 16 * kRows;

  static void pack(const float* x, std::size_t ldx, std::size_t n, std::size_t k, std::uint16_t* xp) {
    pack_tokens_bf16(x, ldx, n, k, xp);
  }
  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::uint16_t* w, std::size_t ldw, const std::uint16_t* xp,
                         std::size_t kc, float* c, std::size_t ldc, bool accumulate, std::index_sequence<MR...> seq) {
    gemm_bf16_micro_rows(rows, w, ldw, xp, kc, c, ldc, accumulate, seq);
  }
};

}  // namespace streamllm::kernels::avx512

#ifdef STREAMLLM_POP_DIAGNOSTICS
#pragma GCC diagnostic pop
#undef STREAMLLM_POP_DIAGNOSTICS
#endif

#endif
