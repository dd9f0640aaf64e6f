// How a weight row enters the int8 tiles (prefill): a block of kc columns
// unpacked once into signed bytes, with the blocks' scales and integer
// corrections beside them. The AVX-512 (VNNI) and AVX2 tiles read the same
// layout; each unpacks it with its own instructions.
#pragma once

#include <cstddef>

#include "streamllm/quant/interleaved.hpp"

namespace streamllm::kernels {

// Split scales (and corrections) per block of 32, each for 32 / Split
// weights, and with Mins as many offsets, each multiplying the activations'
// sum over its weights (Q4_K's -dmin m per block, Q2_K's per half block).
// Lanes: one group of 16 interleaved Q8_0 / Q4_0 blocks (quant/interleaved.hpp)
// unpacked in the group's own order, quad j of every block in one 64-byte
// run and the blocks' scales in lane order, so that unpacking it needs no
// transpose (the kc of such a block is one group).
template <std::size_t Split, bool Mins, bool Lanes = false>
struct Int8Format {
  static constexpr std::size_t kSplit = Split;
  static constexpr bool kMins = Mins;
  // Where quad j (weights 4j..4j+3) of block b starts, and the index of the
  // scale (and correction) of part h of block b.
  static constexpr std::size_t quad_at(std::size_t b, std::size_t j) {
    return Lanes ? 64 * j + 4 * quant::block_group_lane(b) : 32 * b + 4 * j;
  }
  static constexpr std::size_t scale_index(std::size_t b, std::size_t h) {
    return Lanes ? quant::block_group_lane(b) : b * Split + h;
  }
  // A row of a kc-column block as the micro-kernels read it: kc signed bytes,
  // kc/32 x Split float scales, as many int32 corrections, then (Mins) as
  // many float offsets.
  static constexpr std::size_t row_bytes(std::size_t kc) { return kc + (kc / 32) * (8 * Split + (Mins ? 4 * Split : 0)); }
  static constexpr std::size_t scales_at(std::size_t kc) { return kc; }
  static constexpr std::size_t corrections_at(std::size_t kc) { return kc + (kc / 32) * 4 * Split; }
  static constexpr std::size_t mins_at(std::size_t kc) { return kc + (kc / 32) * 8 * Split; }
};
using Int8Blocks = Int8Format<1, false>;  // Q8_0, Q4_0 (and the blocks past an interleaved row's last group)
using Int8Q4K = Int8Format<1, true>;
using Int8Q6K = Int8Format<2, false>;
using Int8Q2K = Int8Format<2, true>;
using Int8Groups = Int8Format<1, false, true>;  // Q8_0x16, Q4_0x16 (AVX-512)

}  // namespace streamllm::kernels
