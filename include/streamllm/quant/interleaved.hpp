// Q8_0 and Q4_0 rows interleaved in groups of 16 blocks: the layout the
// AVX-512 int8 kernels read, so that a group is eight (Q8_0) or four (Q4_0)
// plain vector loads and one load of scales. Read straight from GGUF blocks,
// the kernels spent most of their time transposing (24 vpermt2d per group,
// all on one port on Intel) and gathering scales, and ran below the memory's
// speed; the model copies its matrices into this layout once, at load.
//
// A row's blocks, 16 at a time (a group takes the same bytes as its 16 blocks):
//   quants   vector g (64 bytes), lane L (4 bytes) holds quant bytes
//            4g..4g+3 of block group_lane_block(L): Q8_0 8 vectors, each
//            byte + 128 (unsigned, as vpdpbusd takes them); Q4_0 4 vectors of
//            the packed nibble bytes as they are (low nibble element 4g+i,
//            high nibble element 16+4g+i, both + 8);
//   scales   the 16 blocks' f16 scales, in lane order.
// The blocks past the last whole group stay as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "streamllm/core/dtype.hpp"

namespace streamllm::quant {

inline constexpr std::size_t kGroupBlocks = 16;

// Lane `lane` of a group holds this block of it: the order that the AVX-512
// transpose of 16 blocks loaded in pairs produces (avx512/int8_blocks.hpp), so that
// activations and weights can share it.
constexpr std::size_t group_lane_block(std::size_t lane) { return 2 * (lane % 8) + lane / 8; }
constexpr std::size_t block_group_lane(std::size_t block) { return 8 * (block % 2) + block / 2; }

constexpr bool is_interleaved(DType t) { return t == DType::Q8_0x16 || t == DType::Q4_0x16; }
// The file type an interleaved type was made from, and back.
constexpr DType base_type(DType t) { return t == DType::Q8_0x16 ? DType::Q8_0 : t == DType::Q4_0x16 ? DType::Q4_0 : t; }
constexpr DType interleaved_type(DType t) { return t == DType::Q8_0 ? DType::Q8_0x16 : t == DType::Q4_0 ? DType::Q4_0x16 : t; }

// Quant bytes per block of a base type (after its f16 scale).
constexpr std::size_t quant_bytes(DType base) { return static_cast<std::size_t>(traits(base).block_bytes) - 2; }
// Where, in its group, quant byte j of block b goes, and its scale.
constexpr std::size_t group_quant_offset(std::size_t b, std::size_t j) { return 64 * (j / 4) + 4 * block_group_lane(b) + j % 4; }
constexpr std::size_t group_scale_offset(DType base, std::size_t b) {
  return kGroupBlocks * quant_bytes(base) + 2 * block_group_lane(b);
}

namespace detail {
// Copies a row between its blocks and its interleaved form, either way.
template <bool kToGroups>
inline void copy_row(DType base, const std::byte* src, std::byte* dst, std::int64_t cols) {
  const std::size_t block = quant_bytes(base) + 2, group = kGroupBlocks * block;
  const std::size_t groups = static_cast<std::size_t>(cols / 32) / kGroupBlocks;
  const std::byte flip = base == DType::Q8_0 ? std::byte{0x80} : std::byte{0};
  for (std::size_t G = 0; G < groups; ++G)
    for (std::size_t b = 0; b < kGroupBlocks; ++b) {
      const std::size_t blk = G * group + b * block, scale = G * group + group_scale_offset(base, b);
      for (std::size_t j = 0; j < quant_bytes(base); ++j) {
        const std::size_t at = G * group + group_quant_offset(b, j);
        if constexpr (kToGroups)
          dst[at] = src[blk + 2 + j] ^ flip;
        else
          dst[blk + 2 + j] = src[at] ^ flip;
      }
      std::memcpy(dst + (kToGroups ? scale : blk), src + (kToGroups ? blk : scale), 2);
    }
  std::memcpy(dst + groups * group, src + groups * group, static_cast<std::size_t>(row_bytes(base, cols)) - groups * group);
}
}  // namespace detail

// A row of `cols` elements of Q8_0 or Q4_0 to its interleaved form (the
// reference; kernels/matmul/avx512/int8_blocks.hpp has the fast one), and back.
inline void interleave_row(DType base, const std::byte* src, std::byte* dst, std::int64_t cols) {
  detail::copy_row<true>(base, src, dst, cols);
}
inline void deinterleave_row(DType base, const std::byte* src, std::byte* dst, std::int64_t cols) {
  detail::copy_row<false>(base, src, dst, cols);
}

}  // namespace streamllm::quant
