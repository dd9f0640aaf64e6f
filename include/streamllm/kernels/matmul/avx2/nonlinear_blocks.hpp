// AVX2 decode of IQ4_NL and IQ4_XS rows against int8 activations. The level
// indices become the levels + 128 (1..241, unsigned) by one byte shuffle
// over the table of 16 and the sign bit flipped, which multiply as Q4_0's
// unsigned nibbles do (vpmaddubsw), the offset of 128 taken back as 128 x
// the activation block's sum. Against activations of up to 127 a pair sum
// would pass 32767 (2 x 241 x 127), so these rows' activations are
// quantised to at most 63 (MatmulKernel::activation_limit): 2 x 241 x 63 =
// 30366. That saves the two vpsignb per block of Q8_0's signed product; the
// levels' own error (4 bits of index) dwarfs the activations' halved step.
#pragma once

#include <cstring>

#include "streamllm/kernels/matmul/avx2/int8_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX2_KERNELS

namespace streamllm::kernels::avx2 {

// The 32 levels of 16 bytes of indices (IQ4_NL's order), as int8.
STREAMLLM_AVX2 inline __m256i iq4_levels(const std::uint8_t* qs) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Levels)));
  return _mm256_shuffle_epi8(table, x86::nibbles(qs));
}

// The same levels + 128 (1..241): the sign bit flipped.
STREAMLLM_AVX2 inline __m256i iq4_unsigned_levels(const std::uint8_t* qs) {
  return _mm256_xor_si256(iq4_levels(qs), _mm256_set1_epi8(static_cast<char>(0x80)));
}

// An IQ4_NL block is a Q4_0 block whose quants are looked up, with an offset of 128.
struct IQ4NLRow {
  using Block = quant::BlockIQ4NL;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 128;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return iq4_unsigned_levels(b.qs); }
};

// Super-block sb of an IQ4_XS row against NT tokens: its eight blocks
// reduced together (lane j: block j), the offset of 128 taken back from
// them exactly (128 x the activation blocks' sums), scaled at once by
// d (ls - 32) dx, as the Q4_K kernel does.
template <int NT>
STREAMLLM_AVX2 inline void iq4xs_super_block(const quant::BlockIQ4XS& b, const QuantizedActivations::Slice& xa, std::size_t sb,
                                             __m256 (&acc)[NT]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i q[8];
  for (int j = 0; j < 8; ++j) q[j] = iq4_unsigned_levels(b.qs + 16 * j);
  const __m256 dl = x86::iq4xs_scales(b);
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    const std::int8_t* xq = xa.q_row(tt) + 256 * sb;
    __m256i dots[8];
    for (int j = 0; j < 8; ++j) dots[j] = kquant_dot(q[j], q[j], xq + 32 * j, ones, false);
    const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.sum_row(tt) + 8 * sb));
    const __m256i isum = _mm256_sub_epi32(reduce8(dots), _mm256_slli_epi32(sums, 7));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dl, _mm256_loadu_ps(xa.d_row(tt) + 8 * sb)), acc[t]);
  }
}

}  // namespace streamllm::kernels::avx2

#endif  // STREAMLLM_HAVE_AVX2_KERNELS
