// What every AVX-512 kernel shares: the target attribute they are compiled
// with whatever the build flags (chosen at run time, runtime/cpu_features.hpp,
// so a portable binary still uses them where they exist), a horizontal sum,
// the prefetch distances the decode kernels were measured with, and the token
// count dispatcher compiled for AVX-512.
#pragma once

#include "streamllm/kernels/simd/target.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS
#define STREAMLLM_HAVE_AVX512_KERNELS 1

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "streamllm/core/dtype.hpp"
#include "streamllm/kernels/matmul/activations_q8.hpp"
#include "streamllm/kernels/matmul/gemm.hpp"
#include "streamllm/kernels/runtime/cpu_features.hpp"
#include "streamllm/kernels/runtime/token_count.hpp"
#include "streamllm/kernels/simd/avx512_warnings.hpp"
#include "streamllm/quant/blocks.hpp"

#endif

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
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

// Sum of 16 signed bytes: vpsadbw sums unsigned bytes in groups of 8, so
// flip the sign bits (+128 each) and take 16 x 128 back.
STREAMLLM_AVX512 inline std::int32_t sum_i8x16(__m128i v) {
  const __m128i s = _mm_sad_epu8(_mm_xor_si128(v, _mm_set1_epi8(static_cast<char>(0x80))), _mm_setzero_si128());
  return static_cast<std::int32_t>(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1)) - 16 * 128;
}

// Decode streams the weights once, front to back. The int8 kernels of
// several tokens read rows one after the other (one sequential stream, which
// the hardware prefetcher follows), with a software prefetch this far ahead
// for the first lines of each row; the K-quant kernels likewise, further
// (kInt8PrefetchBytes); the float kernels and one token's int8 kernel read
// four streams (below).
inline constexpr std::size_t kPrefetchBytes = 2048;
inline constexpr bool kPrefetchInt8 = true;  // faster than without (kernel-measurements.md)

STREAMLLM_AVX512 inline void prefetch_ahead(const std::byte* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Float rows against NT tokens are read four at a time, one from each
// quarter of [r0, r1). One core keeps more lines in flight on four
// sequential streams, each prefetched 1 KiB ahead, than on one. Batched
// decode gains more: row after row, each row's longer arithmetic left the
// one stream idle. The prefetches ask for non-temporal lines (NTA): weights
// are read once per token, and that kept more of the streams in flight.
inline constexpr std::size_t kStreamPrefetchBytes = 1024;

STREAMLLM_AVX512 inline void prefetch_stream(const std::byte* p, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_NTA);
}

// The integer kernels of one token (Q8_0 / Q4_0 streams, K-quant rows) do
// more arithmetic per line than the float ones, so the lines they ask for
// must be asked for earlier: 4 KiB ahead instead of 1 (the float kernels
// gain nothing from more; an L2 hint was no different).
inline constexpr std::size_t kInt8PrefetchBytes = 4096;

// Calls f.template operator()<NT>() for NT = nt (1..8), in code compiled for AVX-512.
template <class F>
STREAMLLM_AVX512 inline void with_tokens8(std::size_t nt, F&& f) {
  with_count<8>(nt, std::forward<F>(f));
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
