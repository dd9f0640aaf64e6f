// AVX-512 decode of a super-block format against int8 activations with a
// scale per block of 32 (VNNI): IQ4_XS, whose quants + 128 are too wide for
// the integer scaling of super_blocks_per_256.hpp (the Q2_K to Q4_K kernel,
// which shares this file's Format interface). A format makes a
// super-block's 256 quants four vectors of 64 unsigned bytes (u = q +
// offset) and gives each int32 lane (4 elements) its sub-block's scale;
// vpdpbusd does the products.
#pragma once

#include <algorithm>
#include <cstring>

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

// A format may also give kPieces and piece_quants(b, u): its quants in the
// order they unpack cheapest, quarter q of u[v] (16 bytes) holding the
// super-block's 16-element piece kPieces[4v + q] (IQ4_XS, Q4_K: their
// nibbles as loaded, without the permutes that put them in element order);
// the tokens' quants (and here their block scales) are then put in that
// order once per call. super_blocks_per_256.hpp reads the same.
template <class Format>
concept PieceOrdered = requires { Format::kPieces[0]; };

template <class Format>
constexpr int piece_at(int v, int quarter) {
  if constexpr (PieceOrdered<Format>)
    return Format::kPieces[4 * v + quarter];
  else
    return 4 * v + quarter;
}

// Lane l of vector v (4 elements) lies in sub-block 16 piece_at(v, l / 4) /
// kSubBlock: the permutation that spreads the scales.
template <class Format>
STREAMLLM_AVX512 inline __m512i sub_block_lane_index(int v) {
  alignas(64) std::int32_t index[16];
  for (int l = 0; l < 16; ++l) index[l] = 16 * piece_at<Format>(v, l / 4) / Format::kSubBlock;
  return _mm512_load_si512(index);
}

// A super-block made ready for the dot products: its quants, per vector
// each lane's scale, and per sub-block (lane s) what multiplies the tokens'
// d x sum over sub-block s: offset x scale, plus the min (formats with mins).
struct SuperBlockQuants {
  __m512i u[4];
  __m512 scale[4];
  __m512 per_sum;

  // index[v]: sub_block_lane_index<Format>(v).
  template <class Format>
  STREAMLLM_AVX512 void load(const typename Format::Block& b, const __m512i (&index)[4]) {
    if constexpr (PieceOrdered<Format>)
      Format::piece_quants(b, u);
    else
      Format::quants(b, u);
    const __m512 sc = Format::scales(b);
    for (int v = 0; v < 4; ++v) scale[v] = _mm512_permutexvar_ps(index[v], sc);
    per_sum = _mm512_mul_ps(sc, _mm512_set1_ps(static_cast<float>(Format::kOffset)));
    if constexpr (Format::kMins) per_sum = _mm512_add_ps(per_sum, Format::mins(b));
  }
};

// The tokens' quants and per-lane block scales (d_lanes' layout) in a
// format's piece order, tokens [0, nt); null where that is element order.
struct PieceOrderedTokens {
  const std::int8_t* q = nullptr;
  const float* d_lanes = nullptr;
};
template <class Format>
inline const std::int8_t* piece_ordered_quants(const QuantizedActivations& xa, std::size_t nt, AlignedVector<std::int8_t>& q) {
  if constexpr (!PieceOrdered<Format>) {
    return nullptr;
  } else {
    std::int8_t* o = grow(q, nt * xa.cols);
    for (std::size_t j = 0; j < nt; ++j)
      for (std::size_t sb = 0; sb < xa.cols / 256; ++sb)
        for (std::size_t p = 0; p < 16; ++p)
          std::memcpy(o + j * xa.cols + 256 * sb + 16 * p, xa.q_row(j) + 256 * sb + 16 * Format::kPieces[p], 16);
    return o;
  }
}
template <class Format>
inline PieceOrderedTokens piece_ordered_tokens(const QuantizedActivations& xa, std::size_t nt, AlignedVector<std::int8_t>& q,
                                               AlignedVector<float>& d_lanes) {
  if constexpr (!PieceOrdered<Format>) {
    return {};
  } else {
    const std::size_t supers = xa.cols / 256;
    float* od = grow(d_lanes, nt * supers * 64);
    for (std::size_t j = 0; j < nt; ++j)
      for (std::size_t sb = 0; sb < supers; ++sb)
        for (std::size_t p = 0; p < 16; ++p)
          std::fill_n(od + (j * supers + sb) * 64 + 4 * p, 4, xa.d_row(j)[8 * sb + Format::kPieces[p] / 2]);
    return {piece_ordered_quants<Format>(xa, nt, q), od};
  }
}

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
                                                  PieceOrderedTokens ordered, const float* sums, const __m512i (&index)[4],
                                                  float* y, std::size_t ldy, std::size_t r) {
  using Block = typename Format::Block;
  constexpr bool kPerSum = Format::kMins || Format::kOffset != 0;
  const std::size_t supers = xa.cols / 256;
  __m512 acc[NT][2];  // even and odd vectors: one chain would wait on four FMA latencies per super-block
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  const std::byte* row = w + r * row_bytes;
  for (std::size_t sb = 0; sb < supers; ++sb) {
    prefetch_ahead(row + sb * sizeof(Block) + kInt8PrefetchBytes, sizeof(Block));
    SuperBlockQuants s;
    s.load<Format>(*reinterpret_cast<const Block*>(row + sb * sizeof(Block)), index);
    for (int j = 0; j < NT; ++j) {
      const auto t = static_cast<std::size_t>(j);
      const std::int8_t* xq = (ordered.q ? ordered.q + t * xa.cols : xa.q_row(t)) + 256 * sb;
      const float* xd = (ordered.d_lanes ? ordered.d_lanes + t * xa.cols / 4 : xa.d_lanes_row(t)) + 64 * sb;
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
  thread_local AlignedVector<float> sums, d_lanes;
  thread_local AlignedVector<std::int8_t> q;
  if constexpr (Format::kMins || Format::kOffset != 0) sub_block_sums<Format>(xa, NT, sums);
  const PieceOrderedTokens ordered = piece_ordered_tokens<Format>(xa, NT, q, d_lanes);
  const __m512i index[4] = {sub_block_lane_index<Format>(0), sub_block_lane_index<Format>(1), sub_block_lane_index<Format>(2),
                            sub_block_lane_index<Format>(3)};
  for (std::size_t r = r0; r < r1; ++r)
    gemv_super_block_row<Format, NT>(w, row_bytes, xa, ordered, sums.data(), index, y, ldy, r);
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
