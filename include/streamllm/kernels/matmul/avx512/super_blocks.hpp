// AVX-512 decode of the super-block types that have no kernel of their own
// in kquants.hpp (Q2_K, Q3_K: low_bit_kquants.hpp; IQ4_XS:
// nonlinear_blocks.hpp) against int8 activations (VNNI). One row loop for
// them all: a format makes a super-block's 256 quants four vectors of 64
// unsigned bytes (u = q + offset) and gives each int32 lane (4 elements)
// its sub-block's scale, and Q2_K its min; vpdpbusd does the products.
#pragma once

#include "streamllm/kernels/matmul/avx512/isa.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// A Format names its Block and says, for one super-block:
//   kSubBlock    16 or 32 elements per scale;
//   kOffset      u = q + kOffset (0 when the quants are unsigned already);
//   kMins        whether it has mins (x = scale q - min per sub-block);
//   scales(b)    the sub-blocks' scales, in lanes 0..255 / kSubBlock - 1;
//   mins(b)      likewise, where kMins;
//   quants(b, u) u[v]: the unsigned quants of elements 64v..64v+63.

// Lane l of vector v lies in sub-block 4v + l / 4 (sub-blocks of 16) or
// 2v + l / 8 (of 32): the permutation that spreads the 16 or 8 scales.
STREAMLLM_AVX512 inline __m512i sub_block_lane_index(int sub_block, int v) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  return sub_block == 16 ? _mm512_add_epi32(_mm512_set1_epi32(4 * v), _mm512_srli_epi32(lane, 2))
                         : _mm512_add_epi32(_mm512_set1_epi32(2 * v), _mm512_srli_epi32(lane, 3));
}

// A super-block made ready for the dot products: its quants, per vector
// each lane's scale, and per sub-block (lane s) what multiplies the tokens'
// d x sum over sub-block s: offset x scale, plus the min (formats with mins).
struct SuperBlockQuants {
  __m512i u[4];
  __m512 scale[4];
  __m512 per_sum;

  template <class Format>
  STREAMLLM_AVX512 void load(const typename Format::Block& b) {
    Format::quants(b, u);
    const __m512 sc = Format::scales(b);
    for (int v = 0; v < 4; ++v) scale[v] = _mm512_permutexvar_ps(sub_block_lane_index(Format::kSubBlock, v), sc);
    per_sum = _mm512_mul_ps(sc, _mm512_set1_ps(static_cast<float>(Format::kOffset)));
    if constexpr (Format::kMins) per_sum = _mm512_add_ps(per_sum, Format::mins(b));
  }
};

// What a format's offsets and mins multiply, per token: d x (sum of the
// quants) of each sub-block, 256 / kSubBlock lanes a super-block (16 floats
// apart). Sub-blocks of 32 are the activations' blocks (dsum); of 16, the
// halves of each, summed here once per call rather than once per row.
template <class Format>
STREAMLLM_AVX512 inline void sub_block_sums(const QuantizedActivations& xa, std::size_t nt, AlignedVector<float>& out) {
  const std::size_t supers = xa.cols / 256;
  float* o = grow(out, nt * supers * 16);
  for (std::size_t j = 0; j < nt; ++j)
    for (std::size_t sb = 0; sb < supers; ++sb) {
      float* lanes = o + (j * supers + sb) * 16;
      for (std::size_t b = 0; b < 8; ++b) {
        const std::size_t block = 8 * sb + b;
        if constexpr (Format::kSubBlock == 32) {
          lanes[b] = xa.dsum_row(j)[block];
          lanes[b + 8] = 0;
        } else {
          const std::int8_t* q = xa.q_row(j) + 32 * block;
          const float d = xa.d_row(j)[block];
          lanes[2 * b] = d * static_cast<float>(sum_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
          lanes[2 * b + 1] = d * static_cast<float>(sum_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16))));
        }
      }
    }
}

// Row r of a Format matrix against NT tokens: per lane, scale x u . x; then
// per super-block, less (offset x scale + min) x the tokens' d x sum per
// sub-block (sums: sub_block_sums), one vector for all sixteen sub-blocks.
template <class Format, int NT>
STREAMLLM_AVX512 inline void gemv_super_block_row(const std::byte* w, std::size_t row_bytes, const QuantizedActivations& xa,
                                                  const float* sums, float* y, std::size_t ldy, std::size_t r) {
  using Block = typename Format::Block;
  constexpr bool kPerSum = Format::kMins || Format::kOffset != 0;
  const std::size_t supers = xa.cols / 256;
  __m512 acc[NT][2];  // even and odd vectors: one chain would wait on four FMA latencies per super-block
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  const std::byte* row = w + r * row_bytes;
  for (std::size_t sb = 0; sb < supers; ++sb) {
    prefetch_ahead(row + sb * sizeof(Block) + kInt8PrefetchBytes, sizeof(Block));
    SuperBlockQuants s;
    s.load<Format>(*reinterpret_cast<const Block*>(row + sb * sizeof(Block)));
    for (int j = 0; j < NT; ++j) {
      const std::int8_t* xq = xa.q_row(static_cast<std::size_t>(j)) + 256 * sb;
      const float* xd = xa.d_lanes_row(static_cast<std::size_t>(j)) + 64 * sb;
      for (int v = 0; v < 4; ++v) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), s.u[v], _mm512_loadu_si512(xq + 64 * v));
        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), s.scale[v]);
        acc[j][v % 2] = _mm512_fmadd_ps(f, _mm512_load_ps(xd + 16 * v), acc[j][v % 2]);
      }
      if constexpr (kPerSum)
        acc[j][0] = _mm512_fnmadd_ps(s.per_sum, _mm512_load_ps(sums + (static_cast<std::size_t>(j) * supers + sb) * 16), acc[j][0]);
    }
  }
  for (int j = 0; j < NT; ++j) y[static_cast<std::size_t>(j) * ldy + r] = hsum(_mm512_add_ps(acc[j][0], acc[j][1]));
}

template <class Format, int NT>
STREAMLLM_AVX512 inline void gemv_super_block_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                                   const QuantizedActivations& xa, float* y, std::size_t ldy) {
  thread_local AlignedVector<float> sums;
  if constexpr (Format::kMins || Format::kOffset != 0) sub_block_sums<Format>(xa, NT, sums);
  for (std::size_t r = r0; r < r1; ++r) gemv_super_block_row<Format, NT>(w, row_bytes, xa, sums.data(), y, ldy, r);
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
