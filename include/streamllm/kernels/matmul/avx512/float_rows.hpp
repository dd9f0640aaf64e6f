// AVX-512 decode of float rows: F32, and F16 / BF16 widened to f32 against
// the tokens as they are (exact activations); and the row converters the f32
// tiles take F16 and BF16 through.
#pragma once

#include "streamllm/kernels/matmul/avx512/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

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

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
