// The int8 decode kernels' activations quantised per block of 32 on AVX-512:
// the same rounding as quantize_block (activations_q8.hpp), sixteen lanes at a time.
#pragma once

#include "streamllm/kernels/matmul/avx512/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

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

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
