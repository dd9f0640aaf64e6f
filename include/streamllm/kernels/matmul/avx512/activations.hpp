// The int8 decode kernels' activations quantised per block of 32 (or with
// one scale per 256) on AVX-512: the same rounding as quantize_block
// (activations_q8.hpp), sixteen lanes at a time.
#pragma once

#include "streamllm/kernels/matmul/avx512/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// quantize_with_inverse, vectorised: a block of 32 with a given 1 / scale;
// returns the sum of its quants.
STREAMLLM_AVX512 inline std::int32_t quantize_with_inverse_avx512(const float* v, std::int8_t* q, float id) {
  const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), sign = _mm512_set1_ps(-0.0f);
  __m512i sum = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(v + 16 * h), vid);
    const __m512i qi = _mm512_cvttps_epi32(_mm512_add_ps(s, _mm512_or_ps(half, _mm512_and_ps(s, sign))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * h), _mm512_cvtepi32_epi8(qi));
    sum = _mm512_add_epi32(sum, qi);
  }
  return _mm512_reduce_add_epi32(sum);
}

// abs_max of n floats (a multiple of 16).
STREAMLLM_AVX512 inline AbsMax abs_max_avx512(const float* v, std::size_t n) {
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  __m512 m = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (std::size_t i = 0; i < n; i += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v + i));
    finite &= _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ);  // false for NaN and Inf
    m = _mm512_max_ps(m, a);
  }
  return {_mm512_reduce_max_ps(m), finite == 0xFFFF};
}

// quantize_block, vectorised, with the same rounding (half away from zero).
STREAMLLM_AVX512 inline std::pair<float, std::int32_t> quantize_block_avx512(const float* v, std::int8_t* q) {
  const AbsMax m = abs_max_avx512(v, 32);
  if (!m.finite) return non_finite_block(q);  // NaN or Inf
  const float d = m.amax / 127.0f;
  return {d, quantize_with_inverse_avx512(v, q, quant::inverse_or_zero(d))};
}

// quantize_activations_per_256, vectorised, with the same results.
STREAMLLM_AVX512 inline void quantize_activations_per_256_avx512(const float* x, std::size_t ldx, std::size_t rows,
                                                                 std::size_t cols, QuantizedActivations& out) {
  const float* super = nullptr;  // the super-block whose scale is below
  AbsMax m;
  float d = 0, id = 0;
  quantize_activations_with(x, ldx, rows, cols, out, [&](const float* v, std::int8_t* q) -> std::pair<float, std::int32_t> {
    const std::size_t col = static_cast<std::size_t>(v - x) % ldx;
    const float* start = v - col % 256;
    if (start != super) {
      super = start;
      m = abs_max_avx512(start, std::min<std::size_t>(256, cols - col / 256 * 256));
      d = m.amax / 127.0f;
      id = quant::inverse_or_zero(d);
    }
    if (!m.finite) return non_finite_block(q);
    return {d, quantize_with_inverse_avx512(v, q, id)};
  });
}

STREAMLLM_AVX512 inline void quantize_activations_avx512(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols,
                                                         QuantizedActivations& out) {
  quantize_activations_with(x, ldx, rows, cols, out, quantize_block_avx512);
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
