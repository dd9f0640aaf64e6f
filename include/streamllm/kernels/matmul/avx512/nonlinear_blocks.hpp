// AVX-512 decode of IQ4_NL and IQ4_XS rows against int8 activations (VNNI).
// Their 4-bit indices become the levels plus 128 (unsigned bytes for
// vpdpbusd) by one byte shuffle over the table of 16; the offset 128 is taken
// back as Q8_0's is. IQ4_NL is Q4_0's block with looked-up quants, so it
// takes Q4_0's loads and the 16-block groups; IQ4_XS is a super-block format
// (super_blocks.hpp) whose decode multiplies the levels plus 128 against
// activations with one scale per 256 (super_blocks_per_256.hpp).
#pragma once

#include <cstddef>
#include <cstring>

#include "streamllm/kernels/matmul/avx512/int8_blocks.hpp"
#include "streamllm/kernels/matmul/avx512/super_blocks.hpp"
#include "streamllm/kernels/matmul/x86_rows.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Indices 0..15 in each byte of i to their level + 128.
STREAMLLM_AVX512 inline __m512i iq4_unsigned_levels(__m512i i) {
  const __m512i table = _mm512_xor_si512(
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4Levels))), _mm512_set1_epi8(-128));
  return _mm512_shuffle_epi8(table, i);
}

struct IQ4NLRow {
  using Block = quant::BlockIQ4NL;
  using Pairs = IQ4NLRow;
  static constexpr int kOffsetShift = Q8_0Row::kOffsetShift;  // offset 128, as Q8_0
  static constexpr int kGroupShift = Q8_0Row::kGroupShift;
  static_assert(sizeof(Block) == sizeof(quant::BlockQ4_0) && offsetof(Block, qs) == offsetof(quant::BlockQ4_0, qs));
  static const quant::BlockQ4_0* as_q4_0(const Block* b) { return reinterpret_cast<const quant::BlockQ4_0*>(b); }

  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) {
    return iq4_unsigned_levels(Q4_0Row::unsigned_pair(as_q4_0(b)));
  }
  STREAMLLM_AVX512 static QuantsScales quants_scales_pair(const Block* b) {
    QuantsScales p = Q4_0Row::quants_scales_pair(as_q4_0(b));
    p.u = iq4_unsigned_levels(p.u);
    return p;
  }
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]) {
    const __m512 d = Q4_0Row::load_group16(as_q4_0(b), wq);
    for (int g = 0; g < 8; ++g) wq[g] = iq4_unsigned_levels(wq[g]);
    return d;
  }
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += quant::kIq4Levels[b.qs[j] & 0xF] * x[j] + quant::kIq4Levels[b.qs[j] >> 4] * x[j + 16];
    return s;
  }
};

// An IQ4_XS super-block: vector v holds blocks 2v and 2v + 1, whose 32
// index bytes give, per 16, the low nibbles (elements 0-15) then the high
// ones (16-31); each block's scale is d (ls - 32).
struct IQ4XSFormat {
  using Block = quant::BlockIQ4XS;
  static constexpr int kSubBlock = 32, kOffset = 128;
  static constexpr bool kMins = false;
  STREAMLLM_AVX512 static __m512 scales(const Block& b) { return _mm512_zextps256_ps512(x86::iq4xs_scales(b)); }
  STREAMLLM_AVX512 static void quants(const Block& b, __m512i (&u)[4]) {
    const __m512i twice = _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0);  // each block's 16 bytes, twice
    const long long four = 0x0004000400040004;
    const __m512i shifts = _mm512_set_epi64(four, four, 0, 0, four, four, 0, 0);  // low nibbles, then high
    for (int v = 0; v < 4; ++v) {
      const __m512i raw = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * v)));
      const __m512i nibbles =
          _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi64(twice, raw), shifts), _mm512_set1_epi8(0xF));
      u[v] = iq4_unsigned_levels(nibbles);
    }
  }
  // For the decode kernel (super_blocks_per_256.hpp): the levels plus 128
  // (1..241), wider than vpmaddubsw's pairs take, so it multiplies them by
  // vpdpbusd in int32 lanes (kWideQuants). Its order: 64 bytes are four
  // blocks' nibbles, the low ones (pieces 0, 2, 4, 6 of 16 elements) and the
  // high ones, so a 128-bit lane holds one block's elements.
  static constexpr bool kWideQuants = true;
  static constexpr int kPieces[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  STREAMLLM_AVX512 static void piece_quants(const Block& b, __m512i (&u)[4]) {
    const __m512i m4 = _mm512_set1_epi8(0xF);
    for (int p = 0; p < 2; ++p) {
      const __m512i a = _mm512_loadu_si512(b.qs + 64 * p);
      u[2 * p] = iq4_unsigned_levels(_mm512_and_si512(a, m4));
      u[2 * p + 1] = iq4_unsigned_levels(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4));
    }
  }
  STREAMLLM_AVX512 static float d(const Block& b) { return _cvtsh_ss(b.d); }
  // The blocks' ls - 32 in int16 lanes 0-7. The qword from scales_h holds
  // block s's high two bits at bit 2s and its low four at bit 16 + 4s: one
  // vpmultishiftqb puts the low field in byte 2s and the high in byte 2s + 1,
  // and vpmaddubsw joins them (low + 16 high) in lane s. Five operations
  // where shifting each field into a lane of its own took fourteen: the
  // kernel 1.2x faster from L3 on Zen 5 (performance.md).
  STREAMLLM_AVX512 static void scales_i16(const Block& b, __m256i& scales, __m256i&) {
    std::int64_t bits;
    std::memcpy(&bits, reinterpret_cast<const std::byte*>(&b) + offsetof(Block, scales_h), sizeof bits);
    const __m128i at = _mm_set_epi8(14, 44, 12, 40, 10, 36, 8, 32, 6, 28, 4, 24, 2, 20, 0, 16);
    const __m128i fields = _mm_and_si128(_mm_multishift_epi64_epi8(at, _mm_set1_epi64x(bits)), _mm_set1_epi16(0x030F));
    scales = _mm256_zextsi128_si256(_mm_sub_epi16(_mm_maddubs_epi16(fields, _mm_set1_epi16(0x1001)), _mm_set1_epi16(32)));
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
