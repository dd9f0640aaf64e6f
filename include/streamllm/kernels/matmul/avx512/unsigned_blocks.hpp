// AVX-512 decode of the unsigned blocks of 32 (Q4_1, Q5_0, Q5_1) against int8
// activations (VNNI); the format and the portable twin are in
// portable/unsigned_blocks.hpp.
#pragma once

#include "streamllm/kernels/matmul/avx512/isa.hpp"
#include "streamllm/kernels/matmul/portable/unsigned_blocks.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// Byte and word indices that unpack a pair of blocks from one masked load,
// as Q4_0Row does: vpermb places each block's 16 nibble bytes twice, a shift
// per word picks low or high nibbles, so the 64 quants come out in element
// order; vpermw gathers the two d (lanes 0-7: block 0, 8-15: block 1) and
// the two m.
struct UnsignedPairIndex {
  alignas(64) std::uint8_t quants[64];
  alignas(64) std::uint16_t shifts[32];
  alignas(64) std::uint16_t scales[32];
  alignas(64) std::uint16_t offsets[32];
};
template <class Block>
constexpr UnsignedPairIndex make_unsigned_pair_index() {
  constexpr int bytes = sizeof(Block), qs = offsetof(Block, qs);
  UnsignedPairIndex x{};
  for (int i = 0; i < 64; ++i) x.quants[i] = static_cast<std::uint8_t>((i / 32) * bytes + qs + i % 16);
  for (int i = 0; i < 32; ++i) x.shifts[i] = static_cast<std::uint16_t>((i / 8) % 2 ? 4 : 0);
  for (int i = 0; i < 16; ++i) x.scales[i] = static_cast<std::uint16_t>(i < 8 ? 0 : bytes / 2);
  for (int i = 0; i < 16; ++i) x.offsets[i] = static_cast<std::uint16_t>(i < 8 ? 1 : bytes / 2 + 1);  // the m of Q4_1 / Q5_1
  return x;
}

// A pair of blocks unpacked: 64 quants in element order, d per lane
// (block 0: lanes 0-7, block 1: 8-15) and -m / 8 per lane (Q4_1, Q5_1).
struct UnsignedPair {
  __m512i u;
  __m512 dw, mw;
};
template <class Block>
STREAMLLM_AVX512 inline UnsignedPair unpack_unsigned_pair(const std::byte* pair, const UnsignedPairIndex& index) {
  constexpr std::uint64_t kPairMask = (std::uint64_t{1} << (2 * sizeof(Block))) - 1;
  const __m512i raw = _mm512_maskz_loadu_epi8(kPairMask, pair);
  UnsignedPair p;
  p.u = _mm512_and_si512(
      _mm512_srlv_epi16(_mm512_permutexvar_epi8(_mm512_load_si512(index.quants), raw), _mm512_load_si512(index.shifts)),
      _mm512_set1_epi8(0x0F));
  if constexpr (!std::is_same_v<Block, quant::BlockQ4_1>) {
    const __mmask64 high = fifth_bits(*reinterpret_cast<const Block*>(pair)) |
                           std::uint64_t{fifth_bits(*reinterpret_cast<const Block*>(pair + sizeof(Block)))} << 32;
    p.u = _mm512_mask_add_epi8(p.u, high, p.u, _mm512_set1_epi8(16));
  }
  p.dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(index.scales), raw)));
  p.mw = _mm512_setzero_ps();
  if constexpr (!std::is_same_v<Block, quant::BlockQ5_0>)
    p.mw = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(index.offsets), raw))),
                         _mm512_set1_ps(-0.125f));
  return p;
}

// One pair against one token's pair p of activations, added to acc. The
// offsets come from the activations' per-lane sums (sum_lanes: -sum in each
// of a block's 8 lanes): Q5_0's -16 d q starts the integer sum as 2
// sum_lanes per lane (as Q4_0's -8 does), Q4_1 / Q5_1's m multiplies them
// in float, by -m / 8 per lane.
template <class Block>
STREAMLLM_AVX512 inline __m512 unsigned_pair_dot(__m512 acc, const UnsignedPair& w, const QuantizedActivations& xa, std::size_t t,
                                                 std::size_t p) {
  const __m512i xq = _mm512_loadu_si512(xa.q_row(t) + 64 * p);
  const __m512 xd = _mm512_load_ps(xa.d_lanes_row(t) + 16 * p);
  const __m512i sums = _mm512_load_si512(xa.sum_lanes_row(t) + 16 * p);
  if constexpr (std::is_same_v<Block, quant::BlockQ5_0>) {
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_slli_epi32(sums, 1), w.u, xq);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w.dw, xd), acc);
  } else {
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.u, xq);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w.dw, xd), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(w.mw, xd), acc);
  }
}

// Rows [r0, r1) against NT tokens, two pairs of blocks (128 quants) per
// step, each into its own accumulator to hide the dpbusd -> convert -> fma
// latency; an odd pair and an odd last block after them.
template <class Block, int NT>
STREAMLLM_AVX512 inline void gemv_unsigned_blocks_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                                       const QuantizedActivations& xa, float* y, std::size_t ldy) {
  static constexpr UnsignedPairIndex kIndex = make_unsigned_pair_index<Block>();
  const std::size_t nb = xa.blocks, pairs = nb / 2;
  for (std::size_t r = r0; r < r1; ++r) {
    const std::byte* bytes = w + r * row_bytes;
    __m512 acc[NT][2];
    for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm512_setzero_ps();
    std::size_t p = 0;
    for (; p + 2 <= pairs; p += 2) {
      const std::byte* pair = bytes + 2 * p * sizeof(Block);
      if (kPrefetchInt8) prefetch_ahead(pair + kPrefetchBytes, 4 * sizeof(Block));
      const UnsignedPair a = unpack_unsigned_pair<Block>(pair, kIndex),
                         b = unpack_unsigned_pair<Block>(pair + 2 * sizeof(Block), kIndex);
      for (int t = 0; t < NT; ++t) {
        const auto tt = static_cast<std::size_t>(t);
        acc[t][0] = unsigned_pair_dot<Block>(acc[t][0], a, xa, tt, p);
        acc[t][1] = unsigned_pair_dot<Block>(acc[t][1], b, xa, tt, p + 1);
      }
    }
    if (p < pairs) {
      const UnsignedPair a = unpack_unsigned_pair<Block>(bytes + 2 * p * sizeof(Block), kIndex);
      for (int t = 0; t < NT; ++t) acc[t][0] = unsigned_pair_dot<Block>(acc[t][0], a, xa, static_cast<std::size_t>(t), p);
    }
    for (int t = 0; t < NT; ++t) y[static_cast<std::size_t>(t) * ldy + r] = hsum(_mm512_add_ps(acc[t][0], acc[t][1]));
    if (nb % 2 != 0) {  // the odd block: the twin's arithmetic
      const std::size_t b = nb - 1;
      for (int t = 0; t < NT; ++t)
        y[static_cast<std::size_t>(t) * ldy + r] +=
            unsigned_block_dot(reinterpret_cast<const Block*>(bytes)[b], xa, static_cast<std::size_t>(t), b);
    }
  }
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
