// AVX2 decode of F16 / BF16 rows, 8 elements widened to f32 per load, and
// the row converters the f32 tiles take them through.
#pragma once

#include "streamllm/kernels/matmul/avx2/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

// ---- Float rows: 8 elements widened to f32 per load -------------------------

struct F16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX2 static __m256 load(const std::byte* row, std::size_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  STREAMLLM_AVX2 static float scalar(const std::byte* row, std::size_t k) {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * k, 2);
    return _cvtsh_ss(h);
  }
};

struct BF16Row {
  static constexpr std::size_t kBytes = 2;
  STREAMLLM_AVX2 static __m256 load(const std::byte* row, std::size_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  STREAMLLM_AVX2 static float scalar(const std::byte* row, std::size_t k) {
    std::uint16_t h;
    __builtin_memcpy(&h, row + 2 * k, 2);
    const std::uint32_t bits = std::uint32_t(h) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

// `cols` elements of a row to f32 where a vector converter exists (F16,
// BF16, Q8_0: the f32 tiles' rows, exactly as the scalar loops round them);
// false for the others. The weights are converted once per prefill call,
// whatever its token count, so the conversion is a large share of a short
// prefill (a chat turn's) unless it is vectorised.
template <class Row>
STREAMLLM_AVX2 inline void widen_row(const std::byte* src, std::size_t cols, float* dst) {
  std::size_t i = 0;
  for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(dst + i, Row::load(src, i));
  for (; i < cols; ++i) dst[i] = Row::scalar(src, i);
}

STREAMLLM_AVX2 inline bool dequantize_row_f32(DType t, const std::byte* src, std::size_t cols, float* dst) {
  switch (t) {
    case DType::F16: widen_row<F16Row>(src, cols, dst); return true;
    case DType::BF16: widen_row<BF16Row>(src, cols, dst); return true;
    case DType::Q8_0: {
      const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(src);
      for (std::size_t b = 0; b < cols / 32; ++b) {
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk[b].d));
        for (std::size_t j = 0; j < 32; j += 8) {
          const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk[b].qs + j));
          _mm256_storeu_ps(dst + 32 * b + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
      }
      return true;
    }
    default: return false;
  }
}

// Rows rows[0..R) against NT tokens: R x NT accumulators, two chains per row
// for one token so that the FMA latency is covered; with R = 2 and up to 4
// tokens, 16 ymm registers hold them, the tokens' activations of a step and
// one weight vector.
template <class Row, int NT, std::size_t R>
STREAMLLM_AVX2 inline void gemv_widen_block(const std::size_t (&rows)[R], const std::byte* w, std::size_t row_bytes,
                                            std::size_t k, const float* x, std::size_t ldx, float* y, std::size_t ldy) {
  constexpr int C = NT == 1 ? 2 : 1;
  const std::size_t kend = k / 16 * 16;
  __m256 acc[R][NT][C];
  const std::byte* row[R];
  for (std::size_t i = 0; i < R; ++i) {
    row[i] = w + rows[i] * row_bytes;
    for (int t = 0; t < NT; ++t)
      for (int c = 0; c < C; ++c) acc[i][t][c] = _mm256_setzero_ps();
  }
  for (std::size_t kk = 0; kk < kend; kk += 16) {
    for (std::size_t v = 0; v < 2; ++v) {
      __m256 xv[NT];
      for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + static_cast<std::size_t>(t) * ldx + kk + 8 * v);
      for (std::size_t i = 0; i < R; ++i) {
        const __m256 wv = Row::load(row[i], kk + 8 * v);
        for (int t = 0; t < NT; ++t) acc[i][t][v % C] = _mm256_fmadd_ps(wv, xv[t], acc[i][t][v % C]);
      }
    }
  }
  for (std::size_t i = 0; i < R; ++i)
    for (int t = 0; t < NT; ++t) {
      __m256 s = acc[i][t][0];
      for (int c = 1; c < C; ++c) s = _mm256_add_ps(s, acc[i][t][c]);
      float sum = hsum(s);
      for (std::size_t kk = kend; kk < k; ++kk) sum += Row::scalar(row[i], kk) * x[static_cast<std::size_t>(t) * ldx + kk];
      y[static_cast<std::size_t>(t) * ldy + rows[i]] = sum;
    }
}

// Rows [r0, r1) against NT tokens, two at a time, one from each half of the
// range: two long sequential streams, which the hardware prefetcher follows
// better than four short ones, one, or a software prefetch.
template <class Row, int NT>
STREAMLLM_AVX2 inline void gemv_widen_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                           std::size_t k, const float* x, std::size_t ldx, float* y, std::size_t ldy) {
  constexpr std::size_t R = 2;
  const std::size_t q = (r1 - r0) / R;
  for (std::size_t i = 0; i < q; ++i) {
    std::size_t rows[R];
    for (std::size_t s = 0; s < R; ++s) rows[s] = r0 + s * q + i;
    gemv_widen_block<Row, NT, R>(rows, w, row_bytes, k, x, ldx, y, ldy);
  }
  for (std::size_t r = r0 + R * q; r < r1; ++r) {
    const std::size_t one[1] = {r};
    gemv_widen_block<Row, NT, 1>(one, w, row_bytes, k, x, ldx, y, ldy);
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
