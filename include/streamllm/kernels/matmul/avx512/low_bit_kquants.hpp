// Q2_K and Q3_K super-blocks as the AVX-512 decode kernel
// (super_blocks_per_256.hpp) and the int8 tiles take them. Both have
// sub-blocks of 16 (four lanes). Q2_K: u = q in [0, 4), x = d sc u - dmin m.
// Q3_K: u = q + 4 in [0, 8), x = d (sc - 32) (u - 4).
#pragma once

#include "streamllm/kernels/matmul/avx512/super_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Elements 64v..64v+63 of a Q2_K / Q3_K qs: element 128h + 32c + l is bits
// 2c of qs[32h + l], so both halves of vector v read chunk h = v / 2, the
// low half at c = 2(v % 2), the high one at c + 1.
STREAMLLM_AVX512 inline __m512i low2_bits(const std::uint8_t* qs, int v) {
  const __m512i chunk = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (v / 2))));
  const short shift = static_cast<short>(4 * (v % 2));
  const __m512i shifts = _mm512_inserti64x4(_mm512_set1_epi16(shift), _mm256_set1_epi16(static_cast<short>(shift + 2)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(chunk, shifts), _mm512_set1_epi8(3));
}

// The decode kernel's order (super_blocks.hpp): qs as loaded, 64 bytes, and
// shifted by 2c hold elements 32c..32c+31 (bytes 0-31) and 128+32c.. (32-63):
// vector c is pieces 2c, 2c + 1, 8 + 2c, 9 + 2c. Immediate shifts of one
// load, where element order takes a variable shift of a broadcast per vector.
// Q2_K's quants as they are; Q3_K's before it adds the third bits.
inline constexpr int kLow2Pieces[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
STREAMLLM_AVX512 inline void low2_piece_quants(const std::uint8_t* qs, __m512i (&u)[4]) {
  const __m512i bytes = _mm512_loadu_si512(qs), m3 = _mm512_set1_epi8(3);
  u[0] = _mm512_and_si512(bytes, m3);
  u[1] = _mm512_and_si512(_mm512_srli_epi16(bytes, 2), m3);
  u[2] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), m3);
  u[3] = _mm512_and_si512(_mm512_srli_epi16(bytes, 6), m3);
}

struct Q2KFormat {
  using Block = quant::BlockQ2K;
  static constexpr int kSubBlock = 16, kOffset = 0;
  static constexpr bool kMins = true;
  STREAMLLM_AVX512 static __m512i packed_scales(const Block& b) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  }
  STREAMLLM_AVX512 static __m512 scales(const Block& b) {
    const __m512i sc = _mm512_and_si512(packed_scales(b), _mm512_set1_epi32(0xF));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), _mm512_cvtepi32_ps(sc));
  }
  STREAMLLM_AVX512 static __m512 mins(const Block& b) {
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.dmin)), _mm512_cvtepi32_ps(_mm512_srli_epi32(packed_scales(b), 4)));
  }
  STREAMLLM_AVX512 static void quants(const Block& b, __m512i (&u)[4]) {
    for (int v = 0; v < 4; ++v) u[v] = low2_bits(b.qs, v);
  }
  static constexpr const int (&kPieces)[16] = kLow2Pieces;
  STREAMLLM_AVX512 static void piece_quants(const Block& b, __m512i (&u)[4]) { low2_piece_quants(b.qs, u); }
  // For the kernel of super_blocks_per_256.hpp.
  STREAMLLM_AVX512 static float d(const Block& b) { return _cvtsh_ss(b.d); }
  STREAMLLM_AVX512 static float dmin(const Block& b) { return _cvtsh_ss(b.dmin); }
  STREAMLLM_AVX512 static void scales_i16(const Block& b, __m256i& scales, __m256i& mins) {
    const __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    scales = _mm256_and_si256(packed, _mm256_set1_epi16(0xF));
    mins = _mm256_srli_epi16(packed, 4);
  }
};

struct Q3KFormat {
  using Block = quant::BlockQ3K;
  static constexpr int kSubBlock = 16, kOffset = 4;
  static constexpr bool kMins = false;
  // quant::q3k_scales, sixteen lanes at once (one at a time, the scales
  // cost more than the products: decode ran at a third of Q4_K's speed):
  // scale j is the nibble of byte j % 8 (low for j < 8, high after) and
  // bits 2(j / 4) of byte 8 + j % 4 above it.
  STREAMLLM_AVX512 static __m512 scales(const Block& b) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(0x0FFF, b.scales));
    const __m512i low_at = _mm512_set_epi32(7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i low_shift = _mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i high_at = _mm512_set_epi32(11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8);
    const __m512i high_shift = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
    const __m512i low =
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(low_at, bytes), low_shift), _mm512_set1_epi32(0xF));
    const __m512i high =
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(high_at, bytes), high_shift), _mm512_set1_epi32(3));
    const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), _mm512_set1_epi32(32));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), _mm512_cvtepi32_ps(sc));
  }
  STREAMLLM_AVX512 static float d(const Block& b) { return _cvtsh_ss(b.d); }
  // The scales less 32 (-32..31) as int16, from quant::q3k_scales_i8's bytes.
  STREAMLLM_AVX512 static void scales_i16(const Block& b, __m256i& scales, __m256i&) {
    const __m128i v = _mm_maskz_loadu_epi8(0x0FFF, b.scales), m4 = _mm_set1_epi8(0xF);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    // Bits 2(j / 4) of byte 8 + j % 4, which sits at byte j % 8 of high_bytes'
    // qword j / 8, moved to bits 4-5: vpmultishiftqb takes each output byte's
    // 8 bits from any offset of its qword (rotating), here 8(j % 8) + 2(j / 4) - 4.
    const __m128i high_bytes = _mm_shuffle_epi8(v, _mm_set_epi8(11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8, 11, 10, 9, 8));
    const __m128i shifts = _mm_set_epi8(58, 50, 42, 34, 24, 16, 8, 0, 54, 46, 38, 30, 20, 12, 4, 60);
    const __m128i high = _mm_and_si128(_mm_multishift_epi64_epi8(shifts, high_bytes), _mm_set1_epi8(0x30));
    scales = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_or_si128(low, high)), _mm256_set1_epi16(32));
  }
  // The third bit of element 32j + l is bit j of hmask[l]: vector v's halves
  // take bits 2v and 2v + 1 (16-bit shifts of up to 7 leave each byte's bit
  // at its bit 0).
  STREAMLLM_AVX512 static void quants(const Block& b, __m512i (&u)[4]) {
    const __m512i hmask = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask)));
    for (int v = 0; v < 4; ++v) {
      const __m512i shifts =
          _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * v)), _mm256_set1_epi16(static_cast<short>(2 * v + 1)), 1);
      const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(hmask, shifts), _mm512_set1_epi8(1));
      u[v] = _mm512_or_si512(low2_bits(b.qs, v), _mm512_slli_epi16(high, 2));
    }
  }
  // In Q2_K's piece order: vector c's third bits are bit c of hmask[l]
  // (bytes 0-31) and bit c + 4 (32-63), so the upper half takes hmask >> 4
  // once; then each c moves bit c of every byte to bit 2, and one ternary
  // op (u | high & bit2, 0xF8) sets it.
  static constexpr const int (&kPieces)[16] = kLow2Pieces;
  STREAMLLM_AVX512 static void piece_quants(const Block& b, __m512i (&u)[4]) {
    low2_piece_quants(b.qs, u);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    const __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(hmask), _mm256_srli_epi16(hmask, 4), 1);
    const __m512i bit2 = _mm512_set1_epi8(4);
    u[0] = _mm512_ternarylogic_epi32(u[0], _mm512_slli_epi16(high, 2), bit2, 0xF8);
    u[1] = _mm512_ternarylogic_epi32(u[1], _mm512_slli_epi16(high, 1), bit2, 0xF8);
    u[2] = _mm512_ternarylogic_epi32(u[2], high, bit2, 0xF8);
    u[3] = _mm512_ternarylogic_epi32(u[3], _mm512_srli_epi16(high, 1), bit2, 0xF8);
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
