// Scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
// (Ainslie et al. 2023), over KV segments the model does not own.
//
// Scores are processed a block of keys at a time with an online softmax
// (Milakov & Gimelshein 2018): a running maximum m, a running sum l and a
// running weighted sum of values are rescaled whenever m grows, so no score
// matrix of the whole sequence is ever materialised.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/kernels/axpy.hpp"
#include "streamllm/kernels/dot.hpp"
#include "streamllm/kernels/softmax.hpp"
#include "streamllm/kernels/threading.hpp"

namespace streamllm {

// Everything one query row needs: its query in two rotations (at its text
// position, and at its cache position for sink keys), and the segments it sees.
struct AttentionRow {
  static constexpr int kMaxSegments = kMaxCacheSegments + 2;  // + the new tokens' sinks and window
  const float* q = nullptr;
  const float* q_sink = nullptr;
  KVSegment segments[kMaxSegments];
  int n_segments = 0;
  float* out = nullptr;
};

template <int HeadDim, int Heads, int KVHeads>
struct Attention {
  static constexpr int kGroup = Heads / KVHeads;
  // Keys scored per block: the scores stay in registers and L1.
  static constexpr std::int64_t kBlock = 64;

  // One head of one row: out[HeadDim] = softmax(q K^T / sqrt(d)) V.
  static void head(const AttentionRow& row, int h, float* out) {
    const int kvh = h / kGroup;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    float m = -std::numeric_limits<float>::infinity(), l = 0.f;
    alignas(64) float acc[HeadDim] = {};
    alignas(64) float s[kBlock];
    for (int si = 0; si < row.n_segments; ++si) {
      const KVSegment& seg = row.segments[si];
      const float* q = (seg.sink ? row.q_sink : row.q) + h * HeadDim;
      const float* kbase = seg.k + kvh * HeadDim;
      const float* vbase = seg.v + kvh * HeadDim;
      for (std::int64_t j0 = 0; j0 < seg.count; j0 += kBlock) {
        const std::int64_t nb = std::min(kBlock, seg.count - j0);
        for (std::int64_t j = 0; j < nb; ++j)
          s[j] = kernels::dot(q, kbase + static_cast<std::size_t>(j0 + j) * seg.stride, HeadDim) * scale;
        const float bm = kernels::max_of(s, static_cast<std::size_t>(nb));
        if (bm > m) {  // rescale what was accumulated under the old maximum
          const float corr = std::exp(m - bm);
          l *= corr;
          kernels::scale(corr, acc, HeadDim);
          m = bm;
        }
        l += kernels::exp_shifted(s, static_cast<std::size_t>(nb), m);
        for (std::int64_t j = 0; j < nb; ++j)
          kernels::axpy(s[j], vbase + static_cast<std::size_t>(j0 + j) * seg.stride, acc, HeadDim);
      }
    }
    const float inv = 1.0f / l;
    for (int d = 0; d < HeadDim; ++d) out[d] = acc[d] * inv;
  }

  // Every head of every row, split over threads.
  static void run(const AttentionRow* rows, std::size_t n_rows) {
    const auto items = static_cast<std::int64_t>(n_rows) * Heads;
    std::int64_t work = 0;
    for (std::size_t r = 0; r < n_rows; ++r)
      for (int s = 0; s < rows[r].n_segments; ++s) work += rows[r].segments[s].count;
    work *= Heads * HeadDim * 2;
#pragma omp parallel for schedule(dynamic, 4) if (work >= std::int64_t(kernels::kMinParallelWork))
    for (std::int64_t it = 0; it < items; ++it) {
      const AttentionRow& row = rows[it / Heads];
      const int h = static_cast<int>(it % Heads);
      head(row, h, row.out + h * HeadDim);
    }
  }
};

namespace reference {
// The textbook form over one contiguous key list: scores, softmax, weighted
// sum. The oracle of the online-softmax kernel.
inline void attend_head(const float* q, const float* k, const float* v, std::size_t stride,
                        std::int64_t count, int head_dim, float* out) {
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
    for (std::int64_t j = 0; j < count; ++j) o += s[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>(j) * stride + static_cast<std::size_t>(i)];
    out[i] = static_cast<float>(o / sum);
  }
}
}  // namespace reference

}  // namespace streamllm
