// AVX-512 decode of super-block rows (Q2_K, Q3_K, Q4_K, IQ4_XS) against int8 activations
// with one scale per 256 (the row's quantize: quantize_activations_per_256),
// as llama.cpp's and ik_llama.cpp's kernels take them (Q8_K).
//
// Why: with a scale per block of 32, every vector of products took its own
// float path (convert, lane scales spread by a permute, times the block
// scales, FMA): twenty of a Q4_K super-block's ~44 vector operations, for
// one token. With one scale per super-block the sub-block scales multiply in
// integers: vpmaddubsw takes the products in pairs (int16) and vpdpwssd
// scales the pairs by their sub-block's scale and adds them; one convert
// and one FMA end the super-block. Offsets and mins meet the token's sums
// per sub-block (once per call) in one more vpdpwssd / vpmaddwd.
//
// A Format of super_blocks.hpp also gives, for this kernel:
//   d(b)                         the super-block's scale;
//   scales_i16(b, sc, mn)        its sub-blocks' scales as int16 lanes (and
//                                the mins, where kMins, whose scale is dmin(b));
// and its quants u = q + kOffset must be at most 63: vpmaddubsw's pairs then
// stay inside int16 (2 x 63 x 127). A format whose quants are wider
// (IQ4_XS: levels + 128, 1..241) says kWideQuants: vpdpbusd sums their
// products four to an int32 lane, and one vpmulld scales the lanes of the
// two vectors a sub-block spans: four operations for the pair, where the
// levels as magnitudes against the tokens negated under their signs took
// eight (1.15-1.2x on Zen 5). A format's piece order (kPieces,
// super_blocks.hpp) is read here too.
#pragma once

#include <algorithm>

#include "streamllm/kernels/matmul/avx512/super_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

template <class Format>
concept WideQuants = requires { requires Format::kWideQuants; };
// Whether the kernel needs the tokens' sums per sub-block: the offset the
// products of unsigned quants leave (kOffset) and the mins are taken back
// against them.
template <class Format>
constexpr bool kTakesSums = Format::kOffset != 0 || Format::kMins;

// Pair i (int16 lane i) of vector v lies in sub-block (16 piece + 2 (i % 8))
// / kSubBlock, piece = piece_at(v, i / 8); sub_block_pair_index is the
// permutation that spreads the scales so.
template <class Format>
constexpr int pair_sub_block(int v, int i) {
  return (16 * piece_at<Format>(v, i / 8) + 2 * (i % 8)) / Format::kSubBlock;
}
template <class Format>
STREAMLLM_AVX512 inline __m512i sub_block_pair_index(int v) {
  alignas(64) std::int16_t index[32];
  for (int i = 0; i < 32; ++i) index[i] = static_cast<std::int16_t>(pair_sub_block<Format>(v, i));
  return _mm512_load_si512(index);
}
// Wide quants: int32 lane i of vector v (four elements) lies in the
// sub-block of pair 2i; the permutation that spreads int32 scales so.
template <class Format>
STREAMLLM_AVX512 inline __m512i sub_block_lane_index(int v) {
  alignas(64) std::int32_t index[16];
  for (int i = 0; i < 16; ++i) index[i] = pair_sub_block<Format>(v, 2 * i);
  return _mm512_load_si512(index);
}
// The scale permutations a format's vectors take: of int16 pairs, or of
// int32 lanes for wide quants.
template <class Format>
STREAMLLM_AVX512 inline __m512i sub_block_scale_index(int v) {
  if constexpr (WideQuants<Format>)
    return sub_block_lane_index<Format>(v);
  else
    return sub_block_pair_index<Format>(v);
}
// Whether vector v's pairs lie in the sub-blocks of vector v - 1's (IQ4_XS:
// a block's low and high nibbles): its permute then serves both.
template <class Format>
constexpr bool pairs_as_previous(int v) {
  if (v == 0) return false;
  for (int i = 0; i < 32; ++i)
    if (pair_sub_block<Format>(v, i) != pair_sub_block<Format>(v - 1, i)) return false;
  return true;
}

// Minus the sums of each token's quants per sub-block, sixteen int16 lanes a
// super-block (sub-blocks of 32: lanes 0-7), for tokens [0, nt). Once per call.
template <int kSubBlock>
STREAMLLM_AVX512 inline const __m256i* negated_sub_block_sums(const QuantizedActivations& xa, std::size_t nt,
                                                              AlignedVector<std::int16_t>& out) {
  const std::size_t supers = xa.cols / 256;
  std::int16_t* o = grow(out, nt * supers * 16);
  for (std::size_t j = 0; j < nt; ++j)
    for (std::size_t sb = 0; sb < supers; ++sb) {
      std::int16_t* lanes = o + (j * supers + sb) * 16;
      if constexpr (kSubBlock == 32) {  // the activations' blocks
        for (std::size_t b = 0; b < 8; ++b) lanes[b] = static_cast<std::int16_t>(-xa.sum_row(j)[8 * sb + b]);
        std::fill(lanes + 8, lanes + 16, std::int16_t{0});
      } else {
        const std::int8_t* q = xa.q_row(j) + 256 * sb;
        for (std::size_t h = 0; h < 16; ++h)
          lanes[h] = static_cast<std::int16_t>(-sum_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h))));
      }
    }
  return reinterpret_cast<const __m256i*>(o);
}

// Row r of a Format matrix against NT tokens. Per super-block and token:
// sum over the sub-blocks s of sc_s (u - kOffset) . x, in int32 lanes, times
// d dx; and, with mins, minus dmin dx sum_s m_s S_s (S_s: the token's sum
// over s, negated in neg_sums).
// ordered: piece_ordered_quants' (null: xa's own).
template <class Format, int NT>
STREAMLLM_AVX512 inline void gemv_super_block_row_per_256(const std::byte* w, std::size_t row_bytes,
                                                          const QuantizedActivations& xa, const std::int8_t* ordered,
                                                          const __m256i* neg_sums, const __m512i (&index)[4], float* y,
                                                          std::size_t ldy, std::size_t r) {
  using Block = typename Format::Block;
  constexpr bool kPairsAsPrevious[4] = {false, pairs_as_previous<Format>(1), pairs_as_previous<Format>(2),
                                        pairs_as_previous<Format>(3)};
  const std::size_t supers = xa.cols / 256;
  __m512 acc[NT];
  __m256 min_acc[NT];
  for (int j = 0; j < NT; ++j) {
    acc[j] = _mm512_setzero_ps();
    min_acc[j] = _mm256_setzero_ps();
  }
  const std::byte* row = w + r * row_bytes;
  for (std::size_t sb = 0; sb < supers; ++sb) {
    prefetch_ahead(row + sb * sizeof(Block) + kInt8PrefetchBytes, sizeof(Block));
    const auto& b = *reinterpret_cast<const Block*>(row + sb * sizeof(Block));
    __m512i u[4], sc_pairs[4];
    if constexpr (PieceOrdered<Format>)
      Format::piece_quants(b, u);
    else
      Format::quants(b, u);
    __m256i sc, mins = _mm256_setzero_si256();
    Format::scales_i16(b, sc, mins);
    // Wide quants' scales spread over int32 lanes, the others' over pairs.
    [[maybe_unused]] __m512i sc32;
    if constexpr (WideQuants<Format>) sc32 = _mm512_cvtepi16_epi32(sc);
    for (int v = 0; v < 4; ++v) {
      if constexpr (WideQuants<Format>)
        sc_pairs[v] = kPairsAsPrevious[v] ? sc_pairs[v - 1] : _mm512_permutexvar_epi32(index[v], sc32);
      else
        sc_pairs[v] = kPairsAsPrevious[v] ? sc_pairs[v - 1] : _mm512_permutexvar_epi16(index[v], _mm512_castsi256_si512(sc));
    }
    // The offset's part, sum_s kOffset sc_s (-S_s): one more pair product.
    [[maybe_unused]] const __m512i offset_sc = _mm512_zextsi256_si512(_mm256_mullo_epi16(sc, _mm256_set1_epi16(Format::kOffset)));
    const float d = Format::d(b);
    for (int j = 0; j < NT; ++j) {
      const auto t = static_cast<std::size_t>(j);
      const std::int8_t* xq = (ordered ? ordered + t * xa.cols : xa.q_row(t)) + 256 * sb;
      [[maybe_unused]] __m256i ns;
      if constexpr (kTakesSums<Format>) ns = neg_sums[t * supers + sb];
      __m512i dot = _mm512_setzero_si512();
      if constexpr (WideQuants<Format>) {
        // vpdpbusd sums four products a lane; vectors whose lanes share
        // sub-blocks (kPairsAsPrevious) add up before one vpmulld scales them.
        __m512i part = _mm512_setzero_si512();
        for (int v = 0; v < 4; ++v) {
          part = _mm512_dpbusd_epi32(part, u[v], _mm512_loadu_si512(xq + 64 * v));
          if (v == 3 || !kPairsAsPrevious[v + 1]) {
            dot = _mm512_add_epi32(dot, _mm512_mullo_epi32(part, sc_pairs[v]));
            part = _mm512_setzero_si512();
          }
        }
      } else {
        for (int v = 0; v < 4; ++v)
          dot = _mm512_dpwssd_epi32(dot, _mm512_maddubs_epi16(u[v], _mm512_loadu_si512(xq + 64 * v)), sc_pairs[v]);
      }
      if constexpr (Format::kOffset != 0) dot = _mm512_dpwssd_epi32(dot, offset_sc, _mm512_zextsi256_si512(ns));
      const float dx = xa.d_row(t)[8 * sb];
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(d * dx), acc[j]);
      if constexpr (Format::kMins)
        min_acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mins, ns)), _mm256_set1_ps(Format::dmin(b) * dx),
                                     min_acc[j]);
    }
  }
  for (int j = 0; j < NT; ++j)
    y[static_cast<std::size_t>(j) * ldy + r] = hsum(_mm512_add_ps(acc[j], _mm512_zextps256_ps512(min_acc[j])));
}

template <class Format, int NT>
STREAMLLM_AVX512 inline void gemv_super_block_rows_per_256(std::size_t r0, std::size_t r1, const std::byte* w,
                                                           std::size_t row_bytes, const QuantizedActivations& xa, float* y,
                                                           std::size_t ldy) {
  thread_local AlignedVector<std::int16_t> sums;
  thread_local AlignedVector<std::int8_t> reordered;
  const __m256i* neg_sums = nullptr;
  if constexpr (kTakesSums<Format>) neg_sums = negated_sub_block_sums<Format::kSubBlock>(xa, NT, sums);
  const std::int8_t* ordered = piece_ordered_quants<Format>(xa, NT, reordered);
  const __m512i index[4] = {sub_block_scale_index<Format>(0), sub_block_scale_index<Format>(1),
                            sub_block_scale_index<Format>(2), sub_block_scale_index<Format>(3)};
  for (std::size_t r = r0; r < r1; ++r)
    gemv_super_block_row_per_256<Format, NT>(w, row_bytes, xa, ordered, neg_sums, index, y, ldy, r);
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
