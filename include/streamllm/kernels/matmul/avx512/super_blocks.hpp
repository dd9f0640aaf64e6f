// The super-block formats of the AVX-512 decode kernel (super_blocks_per_256.hpp)
// and of the int8 tiles: IQ4_XS, Q2_K, Q3_K, Q4_K and, for the tiles, Q6_K.
// A format makes a super-block's 256 quants four vectors of 64 bytes and
// its sub-blocks' scales lanes; the kernels do the products.
#pragma once

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
// nibbles as loaded, without the permutes that put them in element order;
// Q2_K, Q3_K: one load shifted by 2c, not a broadcast per vector); the
// decode kernel puts the tokens' quants in that order once per call.
template <class Format>
concept PieceOrdered = requires { Format::kPieces[0]; };

template <class Format>
constexpr int piece_at(int v, int quarter) {
  if constexpr (PieceOrdered<Format>)
    return Format::kPieces[4 * v + quarter];
  else
    return 4 * v + quarter;
}

// The tokens' quants in a format's piece order, tokens [0, nt); null where
// that is element order.
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

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
