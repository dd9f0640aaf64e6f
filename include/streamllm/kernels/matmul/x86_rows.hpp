// How the x86 kernels read a block of 32 (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1):
// its 32 quants as the bytes of one 256-bit register, with what the kernel
// must take back (an offset, a minimum); and IQ4_XS's eight block scales at
// once. AVX2 instructions: the AVX2 kernels read rows with these, and the
// AVX-512 tiles, compiled for a superset, unpack with them.
#pragma once

#include "streamllm/kernels/simd/target.hpp"

#ifdef STREAMLLM_HAVE_X86_KERNELS

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels::x86 {

// A Row gives a block's 32 quants in element order; kSigned: signed
// quants (the sign trick: avx2/int8_blocks.hpp), otherwise unsigned with kOffset taken back
// as kOffset x the activation block's sum, and kMin: an offset m per block
// (Q4_1, Q5_1: x = d q + m), m x the activation block's d x sum.
struct Q8_0Row {
  using Block = quant::BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
};

// Element j in the low nibble of byte j, element j + 16 in the high one:
// the 16 bytes in both halves, the upper half's 64-bit lanes shifted right
// by 4, then every byte masked to its low nibble (the bits a shift carries
// in from the next byte are masked off). Three instructions, not five.
STREAMLLM_AVX2 inline __m256i nibbles(const std::uint8_t* qs) {
  const __m256i p = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(p, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

// 16 in byte j where bit j of a Q5 block's qh is set: byte j gets byte j / 8
// of qh, or'd with every bit but j % 8; all ones means the bit was set.
STREAMLLM_AVX2 inline __m256i fifth_bits16(const std::uint8_t* qh4) {
  std::uint32_t bits;
  __builtin_memcpy(&bits, qh4, sizeof bits);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// Q4_0's nibbles go in unsigned (0..15, the quant + 8) with the activations
// as they are, and 8 x the activation block's sum is taken back: two vpsignb
// and a subtraction fewer per block. Q5_0 likewise with its
// fifth bits (0..31, the quant + 16).
struct Q4_0Row {
  using Block = quant::BlockQ4_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 8;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return nibbles(b.qs); }
};
struct Q5_0Row {
  using Block = quant::BlockQ5_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 16;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits16(b.qh)); }
};
struct Q4_1Row {
  using Block = quant::BlockQ4_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return nibbles(b.qs); }
};
struct Q5_1Row {
  using Block = quant::BlockQ5_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  STREAMLLM_AVX2 static __m256i quants(const Block& b) { return _mm256_or_si256(nibbles(b.qs), fifth_bits16(b.qh)); }
};

// An IQ4_XS super-block's eight block scales ls - 32 (int32 lanes),
// quant::iq4xs_scale for all at once (one at a time, the scales cost more
// than the products): block j's low 4 bits at bit 4j of scales_l, its high 2
// at bit 2j of scales_h. The AVX-512 format takes them too.
STREAMLLM_AVX2 inline __m256i iq4xs_scale_ints(const quant::BlockIQ4XS& b) {
  std::uint32_t low_bits;
  std::memcpy(&low_bits, b.scales_l, 4);
  const __m256i block = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i low = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(low_bits)), _mm256_slli_epi32(block, 2)), _mm256_set1_epi32(0xF));
  const __m256i high =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), _mm256_slli_epi32(block, 1)), _mm256_set1_epi32(3));
  return _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
}
// The same times d: the blocks' scales.
STREAMLLM_AVX2 inline __m256 iq4xs_scales(const quant::BlockIQ4XS& b) {
  return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(iq4xs_scale_ints(b)));
}

}  // namespace streamllm::kernels::x86

#endif  // STREAMLLM_HAVE_X86_KERNELS
