// How a weight row enters the int8 tiles (prefill): a block of kc columns
// unpacked once into signed bytes, with the blocks' scales and integer
// corrections beside them. The AVX-512 (VNNI) and AVX2 tiles read the same
// layout; each unpacks it with its own instructions.
#pragma once

#include <cstddef>

namespace streamllm::kernels {

// Split scales (and corrections) per block of 32, each for 32 / Split
// weights, and with Mins as many offsets, each multiplying the activations'
// sum over its weights (Q4_K's -dmin m per block, Q2_K's per half block).
template <std::size_t Split, bool Mins>
struct Int8Format {
  static constexpr std::size_t kSplit = Split;
  static constexpr bool kMins = Mins;
  // A row of a kc-column block as the micro-kernels read it: kc signed bytes,
  // kc/32 x Split float scales, as many int32 corrections, then (Mins) as
  // many float offsets.
  static constexpr std::size_t row_bytes(std::size_t kc) { return kc + (kc / 32) * (8 * Split + (Mins ? 4 * Split : 0)); }
  static constexpr std::size_t scales_at(std::size_t kc) { return kc; }
  static constexpr std::size_t corrections_at(std::size_t kc) { return kc + (kc / 32) * 4 * Split; }
  static constexpr std::size_t mins_at(std::size_t kc) { return kc + (kc / 32) * 8 * Split; }
};
using Int8Blocks = Int8Format<1, false>;  // Q8_0, Q4_0 (and their interleaved rows)
using Int8Q4K = Int8Format<1, true>;
using Int8Q6K = Int8Format<2, false>;
using Int8Q2K = Int8Format<2, true>;  // the AVX2 tiles only

}  // namespace streamllm::kernels
