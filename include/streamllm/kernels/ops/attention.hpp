// Scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
// (Ainslie et al. 2023), over KV segments the model does not own.
//
// Work is tiled: a block of consecutive query rows of one sequence, times the
// query heads that share one kv head, against blocks of kLanes keys at a
// time. Each key block is loaded once for all those queries. Scores are kept
// only per block, with an online softmax (Milakov & Gimelshein 2018): a
// running maximum m, a running sum l and a running weighted sum of values are
// rescaled whenever m grows, so no score matrix of the sequence is built.
// Which key a query may see follows from text positions: key p is visible to
// the query at t when p <= t and (p < sinks or p > t - window).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/ops/kv_segment.hpp"
#include "streamllm/kernels/ops/transpose.hpp"
#include "streamllm/kernels/runtime/threading.hpp"
#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels {

// Consecutive query rows of one sequence and the keys they may see.
struct AttentionBlock {
  static constexpr int kMaxRows = 16;
  static constexpr int kMaxSegments = kMaxCacheSegments + 2;  // + the new tokens' sinks and window
  const float* q = nullptr;                                   // row i at q + i * ld, rotated at its text position
  const float* q_sink = nullptr;                              // the same, rotated at its cache position (for sink segments)
  float* out = nullptr;                                       // row i at out + i * ld
  std::size_t ld = 0;
  std::int64_t first_pos = 0;  // text position of row 0
  int rows = 0;
  std::int64_t sinks = 0, window = kUnboundedWindow;
  KVSegment segments[kMaxSegments];
  int n_segments = 0;
};

namespace reference {
// The textbook form over one contiguous key list: scores, softmax, weighted
// sum. The oracle of the tiled kernel.
inline void attend_head(const float* q, const float* k, const float* v, std::size_t stride, std::int64_t count, int head_dim,
                        float* out) {
  std::vector<double> s(static_cast<std::size_t>(count));
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < count; ++j) {
    double d = 0;
    for (int i = 0; i < head_dim; ++i) d += double(q[i]) * k[static_cast<std::size_t>(j) * stride + static_cast<std::size_t>(i)];
    s[static_cast<std::size_t>(j)] = d / std::sqrt(double(head_dim));
    mx = std::max(mx, s[static_cast<std::size_t>(j)]);
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  for (int i = 0; i < head_dim; ++i) {
    double o = 0;
    for (std::int64_t j = 0; j < count; ++j)
      o += s[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>(j) * stride + static_cast<std::size_t>(i)];
    out[i] = static_cast<float>(o / sum);
  }
}
}  // namespace reference

}  // namespace streamllm::kernels

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/attention-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

// Every block of rows against what it sees, every kv head, over the threads:
// the tiles of the active kernel family (attention-inl.hpp).
template <int HeadDim, int Heads, int KVHeads>
inline void attend(const AttentionBlock* blocks, std::size_t n_blocks) {
  STREAMLLM_ON_ACTIVE_ISA(Attention<HeadDim, Heads, KVHeads>::run(blocks, n_blocks));
}

}  // namespace streamllm::kernels
