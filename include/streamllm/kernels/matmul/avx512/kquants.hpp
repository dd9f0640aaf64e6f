// AVX-512: Q4_K, Q5_K and Q6_K super-blocks unpacked; Q5_K and Q6_K decode against int8 activations (VNNI).
#pragma once

#include "streamllm/kernels/matmul/avx512/super_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// The K-quants' super-blocks unpacked (for the int8 tiles, int8_tiles.hpp,
// and Q4_K as a format of super_blocks_per_256.hpp), and the decode kernel
// of Q5_K and Q6_K against activations with a scale per 32 (the activations'
// error with one scale per 256 would raise theirs by a quarter and two
// thirds: avx512/rows.hpp).
//
// Q5_K and Q6_K decode: a super-block's quants made unsigned bytes in
// element order, four vectors of 64, for vpdpbusd against the token's int8
// activations; each int32 lane (4 elements) is then multiplied by its
// sub-block's scale (an integer) and, in float, by its activation block's
// scale (d_lanes: 8 lanes per block of 32). Q5_K: x = d sc q - dmin m, q in
// [0, 32): the mins' part is, per sub-block, dmin m times the activation
// block's d * sum, eight per super-block. Q6_K: x = d sc (q - 32), q in
// [0, 64), sub-blocks of 16 (four lanes): the offset's part is, per
// sub-block, sc times 32 dx S (q6k_offset_sums), one FMA of sixteen lanes.

// The 8 scales (times d, in lanes 0-7) and mins (times dmin) of a Q4_K or
// Q5_K block, from their 6-bit packing.
template <class Block>
STREAMLLM_AVX512 inline void q4k_scales_mins(const Block& b, __m512& scales, __m256& mins) {
  const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
  const __m128i sc = _mm_cvtsi64_si128(static_cast<long long>(p.scales)), m = _mm_cvtsi64_si128(static_cast<long long>(p.mins));
  scales = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
  mins = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)));
}

// Q4_K quants: chunk c of 32 bytes holds elements 64c + [0, 32) in its low
// nibbles and 64c + [32, 64) in its high ones.
STREAMLLM_AVX512 inline void q4k_quants(const std::uint8_t* qs, __m512i q[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int p = 0; p < 2; ++p) {
    const __m512i a = _mm512_loadu_si512(qs + 64 * p);  // chunks 2p, 2p + 1
    const __m512i lo = _mm512_and_si512(a, m4), hi = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
    q[2 * p] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0));
    q[2 * p + 1] = _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  }
}

// Q5_K quants: Q4_K's nibbles plus 16 where the fifth bit is set, bit 2c of
// qh[l] for element 64c + l and bit 2c + 1 for 64c + 32 + l.
STREAMLLM_AVX512 inline void q5k_quants(const quant::BlockQ5K& b, __m512i q[4]) {
  q4k_quants(b.qs, q);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  const __m512i h2 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 1), 1);  // bit 2c: both halves
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (int c = 0; c < 4; ++c)
    q[c] =
        _mm512_mask_add_epi8(q[c], _mm512_test_epi8_mask(h2, _mm512_set1_epi8(static_cast<char>(1 << (2 * c)))), q[c], sixteen);
}

// Q6_K quants (q + 32): half n holds elements 128n + [0, 128): ql's 64 bytes
// give the low 4 bits (low nibbles: the first 64, high: the next), qh's 32
// bytes the top 2 (bit pairs 0, 1, 2, 3 for its four runs of 32). qh is
// loaded into both halves of a vector, the upper shifted by 2, so that bit
// pairs 0 and 2 of a byte serve the low nibbles and 1 and 3 (as bits 4-5)
// the high ones; masked to those bits, each vector is then one ternary op:
// nibble | top bits, the bits each takes chosen by the mask 0x0F.
STREAMLLM_AVX512 inline void q6k_quants(const quant::BlockQ6K& b, __m512i q[4]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x33);
  const __m512i shift = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  for (int n = 0; n < 2; ++n) {
    const __m512i a = _mm512_loadu_si512(b.ql + 64 * n);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * n)));
    const __m512i h2 = _mm512_and_si512(_mm512_srlv_epi64(h, shift), top);  // bits 0-1, 4-5 of each byte
    // 0xE4: (A & C) | (B & ~C), C = m4
    q[2 * n] = _mm512_ternarylogic_epi64(a, _mm512_slli_epi16(h2, 4), m4, 0xE4);
    q[2 * n + 1] = _mm512_ternarylogic_epi64(_mm512_srli_epi16(a, 4), h2, m4, 0xE4);
  }
}

// Q6_K as a super-block format (super_blocks.hpp): what the int8 tiles
// unpack it with, as they do Q3_K.
struct Q6KFormat {
  using Block = quant::BlockQ6K;
  static constexpr int kSubBlock = 16, kOffset = 32;
  static constexpr bool kMins = false;
  STREAMLLM_AVX512 static __m512 scales(const Block& b) {
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), _mm512_cvtepi32_ps(sc));
  }
  STREAMLLM_AVX512 static void quants(const Block& b, __m512i (&u)[4]) { q6k_quants(b, u); }
};

// Q4_K as a super-block format of super_blocks_per_256.hpp: sub-blocks of
// 32, x = d sc q - dmin m; its nibbles as loaded (64 bytes, two chunks of
// qs: low nibbles, then high), elements 0-31 64-95 | 32-63 96-127 | 128-159
// 192-223 | 160-191 224-255, in pieces of 16.
struct Q4KFormat {
  using Block = quant::BlockQ4K;
  static constexpr int kSubBlock = 32, kOffset = 0;
  static constexpr bool kMins = true;
  static constexpr int kPieces[16] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  STREAMLLM_AVX512 static float d(const Block& b) { return _cvtsh_ss(b.d); }
  STREAMLLM_AVX512 static float dmin(const Block& b) { return _cvtsh_ss(b.dmin); }
  // The 6-bit scales and mins in int16 lanes 0-7, from their packing in
  // twelve bytes s: sc_j = s_j & 63 and m_j = s_{j+4} & 63 for j < 4; for
  // j >= 4 the low four bits are s_{j+4}'s nibbles (sc low, m high) and the
  // top two s_{j-4}'s (sc) or s_j's (m) bits 6-7. One byte shuffle puts
  // s0-3 s8-11 in each qword of the scales' half and s4-7 s8-11 in the mins';
  // then each field is an 8-bit window of its qword, which vpmultishiftqb
  // takes at any bit: the low fields in one, the top bits in another, into
  // the even bytes (the odd ones masked to zero). Six operations where the
  // scalar unpacking took about sixteen: the kernel 1.24x faster from L3 on
  // Zen 5 (performance.md).
  STREAMLLM_AVX512 static void scales_i16(const Block& b, __m256i& scales, __m256i& mins) {
    const __m256i s = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    const __m256i qwords = _mm256_shuffle_epi8(s, _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7,
                                                                   8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    // Window starts (even bytes) and masks: scales j < 4, j >= 4, mins j < 4, j >= 4.
    const __m256i low_at = _mm256_setr_epi8(0, 0, 8, 0, 16, 0, 24, 0, 32, 0, 40, 0, 48, 0, 56, 0,  //
                                            0, 0, 8, 0, 16, 0, 24, 0, 36, 0, 44, 0, 52, 0, 60, 0);
    const __m256i low_mask = _mm256_setr_epi64x(0x003f003f003f003f, 0x000f000f000f000f, 0x003f003f003f003f, 0x000f000f000f000f);
    const __m256i top_at = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 10, 0, 18, 0, 26, 0,  //
                                            0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 10, 0, 18, 0, 26, 0);
    const __m256i top_mask = _mm256_setr_epi64x(0, 0x0030003000300030, 0, 0x0030003000300030);
    const __m256i low = _mm256_and_si256(_mm256_multishift_epi64_epi8(low_at, qwords), low_mask);
    // low | (top & top_mask)
    const __m256i both = _mm256_ternarylogic_epi64(low, _mm256_multishift_epi64_epi8(top_at, qwords), top_mask, 0xF8);
    scales = _mm256_zextsi128_si256(_mm256_castsi256_si128(both));  // lanes 8-15 zero, as for mins
    mins = _mm256_zextsi128_si256(_mm256_extracti128_si256(both, 1));
  }
  STREAMLLM_AVX512 static void piece_quants(const Block& b, __m512i (&u)[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < 2; ++p) {
      const __m512i a = _mm512_loadu_si512(b.qs + 64 * p);
      u[2 * p] = _mm512_and_si512(a, m4);
      u[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(a, 4), m4);
    }
  }
};

// Lane l of vector v of a super-block lies in Q5_K sub-block 2v + l / 8
// and in Q6_K sub-block 4v + l / 4: the scale each lane takes.
STREAMLLM_AVX512 inline __m512i kquant_lane_scale_index(DType t, int v) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return t == DType::Q6_K ? _mm512_add_epi32(_mm512_set1_epi32(4 * v), _mm512_srli_epi32(lane, 2))
                          : _mm512_add_epi32(_mm512_set1_epi32(2 * v), _mm512_srli_epi32(lane, 3));
}

// Q6_K's offset of 32 per token, once per call: lane s of each super-block's
// sixteen is 32 dx S_s, S_s the token's sum over sub-block s (of 16) and dx
// its activation block's scale. Times the sub-block's scale, it is what the
// offset takes off a super-block's sum: one FMA a token and super-block
// where taking it off the products cost a vpdpbusd and a subtraction per
// vector.
STREAMLLM_AVX512 inline const float* q6k_offset_sums(const QuantizedActivations& xa, std::size_t nt, AlignedVector<float>& out) {
  const std::size_t runs = xa.cols / 16;
  float* o = grow(out, nt * runs);
  for (std::size_t j = 0; j < nt; ++j)
    for (std::size_t s = 0; s < runs; ++s) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q_row(j) + 16 * s));
      o[j * runs + s] = 32.0f * xa.d_row(j)[s / 2] * static_cast<float>(sum_i8x16(q));
    }
  return o;
}

// Row r of a K-quant matrix against NT tokens' int8 activations; index[v]
// is kquant_lane_scale_index(T, v); offsets: q6k_offset_sums' (Q6_K). The
// type is a template parameter, so the block's size is known: its
// prefetches are unrolled instead of a loop with a branch per block, and the
// choice of type is made once per call.
// Per vector and token: vpdpbusd, then vpmulld by the lanes' sub-block
// scales (integers, spread once per super-block, not per token: products of
// at most 4 x 63 x 127 x 128 fit int32), one convert and one FMA by the
// activation blocks' scales; d once per super-block.
template <DType T, int NT>
STREAMLLM_AVX512 inline void gemv_kquant_int8_row(const std::byte* w, std::size_t row_bytes, const QuantizedActivations& xa,
                                                  const float* offsets, const __m512i (&index)[4], float* y, std::size_t ldy,
                                                  std::size_t r) {
  static_assert(T == DType::Q5_K || T == DType::Q6_K, "Q4_K decodes in super_blocks_per_256.hpp");
  constexpr bool q4k = T == DType::Q5_K;  // affine, sub-blocks of 32, as Q4_K
  using Block = std::conditional_t<q4k, quant::BlockQ5K, quant::BlockQ6K>;
  const std::size_t runs = xa.cols / 16;
  __m512 acc[NT];
  __m256 min_acc[NT];
  for (int j = 0; j < NT; ++j) {
    acc[j] = _mm512_setzero_ps();
    min_acc[j] = _mm256_setzero_ps();
  }
  const std::byte* row = w + r * row_bytes;
  for (std::size_t sb = 0; sb < xa.cols / 256; ++sb) {
    const auto& b = *reinterpret_cast<const Block*>(row + sb * sizeof(Block));
    prefetch_ahead(row + sb * sizeof(Block) + kInt8PrefetchBytes, sizeof(Block));
    __m512i q[4], scales;
    [[maybe_unused]] __m256 mins;
    if constexpr (q4k) {
      const quant::Q4KScalesMins p = quant::q4k_scales_mins_bytes(b.scales);
      scales = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(p.scales)));
      mins = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.dmin)),
                           _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(p.mins)))));
      q5k_quants(b, q);
    } else {
      scales = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
      q6k_quants(b, q);
    }
    const __m512i lane_scales[4] = {_mm512_permutexvar_epi32(index[0], scales), _mm512_permutexvar_epi32(index[1], scales),
                                    _mm512_permutexvar_epi32(index[2], scales), _mm512_permutexvar_epi32(index[3], scales)};
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b.d));
    for (int j = 0; j < NT; ++j) {
      const std::int8_t* xq = xa.q_row(static_cast<std::size_t>(j)) + 256 * sb;
      const float* xd = xa.d_lanes_row(static_cast<std::size_t>(j)) + 64 * sb;  // 4 pairs of blocks
      // Two sums (even and odd vectors), so that the FMAs do not chain four deep.
      __m512 part[2];
      for (int v = 0; v < 4; ++v) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[v], _mm512_loadu_si512(xq + 64 * v));
        const __m512 scaled = _mm512_cvtepi32_ps(_mm512_mullo_epi32(dot, lane_scales[v]));
        part[v % 2] = v < 2 ? _mm512_mul_ps(scaled, _mm512_load_ps(xd + 16 * v))
                            : _mm512_fmadd_ps(scaled, _mm512_load_ps(xd + 16 * v), part[v % 2]);
      }
      if constexpr (q4k) {
        min_acc[j] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(xa.dsum_row(static_cast<std::size_t>(j)) + 8 * sb), min_acc[j]);
      } else {
        part[0] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(scales),
                                   _mm512_loadu_ps(offsets + static_cast<std::size_t>(j) * runs + 16 * sb), part[0]);
      }
      acc[j] = _mm512_fmadd_ps(_mm512_add_ps(part[0], part[1]), d, acc[j]);
    }
  }
  // The mins' eight lanes are taken from the sums before the one horizontal
  // sum a row needs (rows of 2048 are only 8 super-blocks).
  for (int j = 0; j < NT; ++j)
    y[static_cast<std::size_t>(j) * ldy + r] = hsum(_mm512_sub_ps(acc[j], _mm512_zextps256_ps512(min_acc[j])));
}

template <int NT>
STREAMLLM_AVX512 inline void gemv_kquant_int8_rows(DType t, std::size_t r0, std::size_t r1, const std::byte* w,
                                                   std::size_t row_bytes, const QuantizedActivations& xa, float* y,
                                                   std::size_t ldy) {
  const __m512i index[4] = {kquant_lane_scale_index(t, 0), kquant_lane_scale_index(t, 1), kquant_lane_scale_index(t, 2),
                            kquant_lane_scale_index(t, 3)};
  if (t == DType::Q5_K) {
    for (std::size_t r = r0; r < r1; ++r) gemv_kquant_int8_row<DType::Q5_K, NT>(w, row_bytes, xa, nullptr, index, y, ldy, r);
  } else {
    thread_local AlignedVector<float> sums;
    const float* offsets = q6k_offset_sums(xa, NT, sums);
    for (std::size_t r = r0; r < r1; ++r) gemv_kquant_int8_row<DType::Q6_K, NT>(w, row_bytes, xa, offsets, index, y, ldy, r);
  }
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
