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

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/ops/simd.hpp"
#include "streamllm/kernels/runtime/threading.hpp"
#include "streamllm/kernels/ops/transpose.hpp"
#include "streamllm/memory.hpp"

namespace streamllm {

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

template <int HeadDim, int Heads, int KVHeads>
struct Attention {
  static constexpr int kGroup = Heads / KVHeads;
  static constexpr int kQueries = AttentionBlock::kMaxRows * kGroup;
  static constexpr std::size_t L = kernels::kLanes;
  static constexpr bool kVectorDot = HeadDim % L == 0;  // else scores one by one
  using Batch = kernels::Batch;

  // Per query: running max, running sum (lane by lane: summed once, at the
  // end), and the weighted sum of values.
  struct State {
    float m[kQueries];
    alignas(64) float l[kQueries][L];
    alignas(64) float acc[kQueries][HeadDim];
  };

  // How far (in log space) a score may pass the running maximum before the
  // maximum moves: a block whose scores stay within it (nearly all, once the
  // first blocks have set the maximum) needs no horizontal maximum and no
  // rescaling, one vector compare instead. The result is the same: any
  // maximum cancels between the weights and their sum; this one keeps every
  // weight below e^8, far from float's range.
  static constexpr float kMaxMargin = 8.0f;

  // Scores of one query against the keys of one block (nk <= L of them).
  static Batch scores(const float* q, const float* k, std::size_t stride, std::size_t nk) {
    if constexpr (kVectorDot) {
      Batch qv[HeadDim / L];
      for (std::size_t v = 0; v < HeadDim / L; ++v) qv[v] = kernels::load(q + v * L);
      Batch partial[L];
      for (std::size_t j = 0; j < L; ++j) {
        Batch s(0.f);
        if (j < nk)
          for (std::size_t v = 0; v < HeadDim / L; ++v) s = xsimd::fma(qv[v], kernels::load(k + j * stride + v * L), s);
        partial[j] = s;
      }
      return kernels::sum_each(partial);  // lane j: the sum of partial[j]
    } else {
      alignas(64) float s[L] = {};
      for (std::size_t j = 0; j < nk; ++j) s[j] = kernels::dot(q, k + j * stride, HeadDim);
      return Batch::load_aligned(s);
    }
  }

  // The same from the block's keys laid out along the lanes (kt[d][j] = key j,
  // dimension d; lanes past a partial block's keys hold zeros or an earlier
  // block's keys, which the caller masks): one broadcast and fma per
  // dimension, no horizontal sums. Transposing the block pays off once many
  // queries read it (a prefill block: up to 16 rows x kGroup heads).
  static constexpr int kQueriesToTranspose = 16;
  static constexpr bool kCanTranspose = HeadDim % 4 == 0;
  static Batch scores_by_lanes(const float* q, const float (*kt)[L]) {
    static_assert(kCanTranspose);
    Batch s0(0.f), s1(0.f), s2(0.f), s3(0.f);  // four chains hide the fma latency
    for (std::size_t d = 0; d < static_cast<std::size_t>(HeadDim); d += 4) {
      s0 = xsimd::fma(Batch(q[d]), Batch::load_aligned(kt[d]), s0);
      s1 = xsimd::fma(Batch(q[d + 1]), Batch::load_aligned(kt[d + 1]), s1);
      s2 = xsimd::fma(Batch(q[d + 2]), Batch::load_aligned(kt[d + 2]), s2);
      s3 = xsimd::fma(Batch(q[d + 3]), Batch::load_aligned(kt[d + 3]), s3);
    }
    return (s0 + s1) + (s2 + s3);
  }

  // One query's online softmax over one key block: from its scores s
  // (invisible lanes -inf), the keys' weights p; the running sum updated,
  // and, when a score passes the maximum by more than kMaxMargin, the
  // maximum moved and what was accumulated under the old one rescaled.
  // N vectors of keys at once: one compare for all.
  template <std::size_t N>
  static void softmax_step(const Batch (&s)[N], const typename Batch::batch_bool_type (&visible)[N], State& st, int qi,
                           float* p) {
    Batch mx = s[0];
    for (std::size_t i = 1; i < N; ++i) mx = xsimd::max(mx, s[i]);
    if (xsimd::any(mx > Batch(st.m[qi] + kMaxMargin))) {
      alignas(64) float sv[L];
      mx.store_aligned(sv);
      const float bm = *std::max_element(sv, sv + L);
      const float corr = std::exp(st.m[qi] - bm);
      (Batch::load_aligned(st.l[qi]) * Batch(corr)).store_aligned(st.l[qi]);
      for (int d = 0; d < HeadDim; ++d) st.acc[qi][d] *= corr;
      st.m[qi] = bm;
    }
    Batch sum = Batch::load_aligned(st.l[qi]);
    for (std::size_t i = 0; i < N; ++i) {
      const Batch e = xsimd::select(visible[i], xsimd::exp(s[i] - Batch(st.m[qi])), Batch(0.f));
      e.store_aligned(p + i * L);
      sum += e;
    }
    sum.store_aligned(st.l[qi]);
  }

  // Heads of one row taken together against a block of keys along the lanes
  // (attend_heads): as many as divide kGroup, up to 4, while their value sums
  // fit in 16 registers. A prefill block reads each key vector and value row
  // once for all of them instead of once per head.
  static constexpr int kHeadTile = [] {
    if (!kVectorDot || !kCanTranspose) return 1;
    for (int g : {4, 2})
      if (kGroup % g == 0 && g * HeadDim / static_cast<int>(L) <= 16) return g;
    return 1;
  }();

  // Keys per block on the head-tile path: two vectors, so that each
  // broadcast of a query element feeds two fmas (one per key vector) and the
  // softmax's horizontal maximum and sum are paid once per 2L keys.
  static constexpr std::size_t kTileKeys = 2 * L;

  // G heads of one row (queries qi0.., q[g] their vectors) against the key
  // block kt (kTileKeys keys along the lanes) and its values vb, the visible
  // keys [lo, hi]: online softmax and weighted sums as in run_one.
  template <int G>
  static void attend_heads(const float* const (&q)[G], const float (*kt)[kTileKeys], const float* vb, std::size_t stride,
                           const typename Batch::batch_bool_type (&visible)[2], std::size_t lo, std::size_t hi, State& st,
                           int qi0) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    const Batch neg_inf(-std::numeric_limits<float>::infinity());
    Batch s[G][2];  // per head, the two key vectors: independent chains
    for (int g = 0; g < G; ++g) s[g][0] = s[g][1] = Batch(0.f);
    for (std::size_t d = 0; d < static_cast<std::size_t>(HeadDim); ++d) {
      Batch k0 = Batch::load_aligned(kt[d]), k1 = Batch::load_aligned(kt[d] + L);
      kernels::in_register(k0);
      kernels::in_register(k1);
      for (int g = 0; g < G; ++g) {
        const Batch qd(q[g][d]);
        s[g][0] = xsimd::fma(qd, k0, s[g][0]);
        s[g][1] = xsimd::fma(qd, k1, s[g][1]);
      }
    }
    alignas(64) float p[G][kTileKeys];
    for (int g = 0; g < G; ++g) {
      const Batch scores[2] = {xsimd::select(visible[0], s[g][0] * Batch(scale), neg_inf),
                               xsimd::select(visible[1], s[g][1] * Batch(scale), neg_inf)};
      softmax_step(scores, visible, st, qi0 + g, p[g]);
    }
    Batch a[G][HeadDim / L];
    for (int g = 0; g < G; ++g)
      for (std::size_t d = 0; d < HeadDim / L; ++d) a[g][d] = kernels::load(st.acc[qi0 + g] + d * L);
    for (std::size_t j = lo; j <= hi; ++j) {
      const float* v = vb + j * stride;
      for (std::size_t d = 0; d < HeadDim / L; ++d) {
        Batch vv = kernels::load(v + d * L);
        kernels::in_register(vv);
        for (int g = 0; g < G; ++g) a[g][d] = xsimd::fma(Batch(p[g][j]), vv, a[g][d]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t d = 0; d < HeadDim / L; ++d) kernels::store(st.acc[qi0 + g] + d * L, a[g][d]);
  }

  // The running state of nq queries before any key.
  static void begin(State& st, int nq) {
    for (int i = 0; i < nq; ++i) {
      st.m[i] = -std::numeric_limits<float>::infinity();
      std::fill_n(st.l[i], L, 0.0f);
      std::fill_n(st.acc[i], HeadDim, 0.0f);
    }
  }

  // One query's weighted values: acc += sum of p[j] v[j] over the visible
  // keys [lo, hi] of the block vb.
  static void add_weighted_values(const float* p, std::size_t lo, std::size_t hi, const float* vb, std::size_t stride,
                                  float* acc) {
    if constexpr (kVectorDot) {
      // The running sum stays in registers across the block's keys, even and
      // odd keys in separate sums: one chain of fmas per vector would wait on
      // its latency at every key.
      Batch even[HeadDim / L], odd[HeadDim / L];
      for (std::size_t d = 0; d < HeadDim / L; ++d) {
        even[d] = kernels::load(acc + d * L);
        odd[d] = Batch(0.f);
      }
      std::size_t j = lo;
      for (; j + 1 <= hi; j += 2) {
        const Batch pj(p[j]), pk(p[j + 1]);
        const float* v = vb + j * stride;
        for (std::size_t d = 0; d < HeadDim / L; ++d) {
          even[d] = xsimd::fma(pj, kernels::load(v + d * L), even[d]);
          odd[d] = xsimd::fma(pk, kernels::load(v + stride + d * L), odd[d]);
        }
      }
      if (j == hi)
        for (std::size_t d = 0; d < HeadDim / L; ++d)
          even[d] = xsimd::fma(Batch(p[j]), kernels::load(vb + j * stride + d * L), even[d]);
      for (std::size_t d = 0; d < HeadDim / L; ++d) kernels::store(acc + d * L, even[d] + odd[d]);
    } else {
      // Local sums, even and odd keys apart, as above: through acc itself,
      // which the compiler cannot prove apart from the values, every add
      // would be a store.
      float even[HeadDim], odd[HeadDim] = {};
      std::copy_n(acc, HeadDim, even);
      std::size_t j = lo;
      for (; j + 1 <= hi; j += 2) {
        const float* v = vb + j * stride;
        for (int d = 0; d < HeadDim; ++d) {
          even[d] += p[j] * v[d];
          odd[d] += p[j + 1] * v[stride + static_cast<std::size_t>(d)];
        }
      }
      if (j == hi)
        for (int d = 0; d < HeadDim; ++d) even[d] += p[j] * vb[j * stride + static_cast<std::size_t>(d)];
      for (int d = 0; d < HeadDim; ++d) acc[d] = even[d] + odd[d];
    }
  }

  // A block of at most L keys of one segment, as every row of a block reads
  // it: the keys (and, with `by_lanes`, along the lanes in kt), the values.
  struct KeyBlock {
    const float* k;
    const float* v;
    std::size_t stride, count;
    const float (*kt)[L];
    bool by_lanes;
  };

  // One query head against a key block: scores, online softmax, weighted
  // values; p is scratch for the keys' weights.
  static void attend_head(const float* q, const KeyBlock& kb, const typename Batch::batch_bool_type& visible, std::size_t lo,
                          std::size_t hi, State& st, int qi, float* p) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    Batch raw;
    if constexpr (kCanTranspose)
      raw = kb.by_lanes ? scores_by_lanes(q, kb.kt) : scores(q, kb.k, kb.stride, kb.count);
    else
      raw = scores(q, kb.k, kb.stride, kb.count);
    const Batch scored[1] = {xsimd::select(visible, raw * Batch(scale), Batch(-std::numeric_limits<float>::infinity()))};
    const typename Batch::batch_bool_type vis[1] = {visible};
    softmax_step(scored, vis, st, qi, p);
    add_weighted_values(p, lo, hi, kb.v, kb.stride, st.acc[qi]);
  }

  // The block's rows normalised into its output: the query heads of kv head kvh.
  static void finish(const AttentionBlock& b, int kvh, const State& st) {
    for (int r = 0; r < b.rows; ++r)
      for (int h = 0; h < kGroup; ++h) {
        const int qi = r * kGroup + h;
        float* out = b.out + static_cast<std::size_t>(r) * b.ld + static_cast<std::size_t>((kvh * kGroup + h) * HeadDim);
        const float inv = 1.0f / xsimd::hadd(Batch::load_aligned(st.l[qi]));
        for (int d = 0; d < HeadDim; ++d) out[d] = st.acc[qi][d] * inv;
      }
  }

  // One block of rows, the query heads of kv head kvh: every key block of
  // every segment, each read once for all the rows and heads that see it.
  static void run_one(const AttentionBlock& b, int kvh, State& st) {
    const int nq = b.rows * kGroup;
    begin(st, nq);
    const std::int64_t last_pos = b.first_pos + b.rows - 1;
    alignas(64) float lane_pos[L];
    alignas(64) float p[L];
    alignas(64) float kt[HeadDim][L];
    alignas(64) float kt2[kHeadTile > 1 ? HeadDim : 1][kTileKeys];  // the head tiles' blocks of 2L keys
    // Heads narrower than a vector (HeadDim < L) have no vector dot at all:
    // their keys go along the lanes whenever enough queries read them.
    const bool by_lanes = kCanTranspose && nq >= kQueriesToTranspose;
    const bool head_tiles = kHeadTile > 1 && by_lanes;
    const std::size_t block_keys = head_tiles ? kTileKeys : L;
    if (head_tiles)
      std::fill_n(&kt2[0][0], sizeof(kt2) / sizeof(float), 0.0f);
    else if (by_lanes)
      std::fill_n(&kt[0][0], HeadDim * L, 0.0f);
    for (std::size_t j = 0; j < L; ++j) lane_pos[j] = static_cast<float>(j);
    const Batch jpos = Batch::load_aligned(lane_pos);
    for (int si = 0; si < b.n_segments; ++si) {
      const KVSegment& seg = b.segments[si];
      const float* qbase = seg.sink ? b.q_sink : b.q;
      for (std::int64_t j0 = 0; j0 < seg.count; j0 += static_cast<std::int64_t>(block_keys)) {
        const std::int64_t p0 = seg.first_pos + j0;
        if (p0 > last_pos) break;  // causal: no row sees these (positions only grow along a segment)
        const KeyBlock kb{seg.k + kvh * HeadDim + static_cast<std::size_t>(j0) * seg.stride,
                          seg.v + kvh * HeadDim + static_cast<std::size_t>(j0) * seg.stride,
                          seg.stride,
                          static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(block_keys), seg.count - j0)),
                          kt,
                          by_lanes};
        if (head_tiles)
          kernels::transpose(kb.k, kb.stride, kb.count, static_cast<std::size_t>(HeadDim), &kt2[0][0], kTileKeys);
        else if (by_lanes)
          kernels::transpose(kb.k, kb.stride, kb.count, static_cast<std::size_t>(HeadDim), &kt[0][0], L);
        for (int r = 0; r < b.rows; ++r) {
          const std::int64_t t = b.first_pos + r;
          // Visible lanes j: p0 + j <= t, and (a sink, or inside the window).
          const std::int64_t hi = std::min<std::int64_t>(static_cast<std::int64_t>(kb.count) - 1, t - p0);
          const std::int64_t lo = p0 < b.sinks ? 0 : std::max<std::int64_t>(0, t - b.window + 1 - p0);
          if (hi < lo) continue;
          const auto visible = (jpos >= Batch(static_cast<float>(lo))) & (jpos <= Batch(static_cast<float>(hi)));
          const float* qrow = qbase + static_cast<std::size_t>(r) * b.ld + static_cast<std::size_t>(kvh * kGroup * HeadDim);
          if constexpr (kHeadTile > 1) {
            if (head_tiles) {
              const Batch second = jpos + Batch(static_cast<float>(L));
              const typename Batch::batch_bool_type vis[2] = {
                  visible, (second >= Batch(static_cast<float>(lo))) & (second <= Batch(static_cast<float>(hi)))};
              for (int h = 0; h < kGroup; h += kHeadTile) {
                const float* q[kHeadTile];
                for (int g = 0; g < kHeadTile; ++g) q[g] = qrow + static_cast<std::size_t>((h + g) * HeadDim);
                attend_heads<kHeadTile>(q, kt2, kb.v, kb.stride, vis, static_cast<std::size_t>(lo), static_cast<std::size_t>(hi),
                                        st, r * kGroup + h);
              }
              continue;
            }
          }
          for (int h = 0; h < kGroup; ++h)
            attend_head(qrow + static_cast<std::size_t>(h * HeadDim), kb, visible, static_cast<std::size_t>(lo),
                        static_cast<std::size_t>(hi), st, r * kGroup + h, p);
        }
      }
    }
    finish(b, kvh, st);
  }

  // Every block, every kv head, split over threads.
  static void run(const AttentionBlock* blocks, std::size_t n_blocks) {
    const auto items = static_cast<std::int64_t>(n_blocks) * KVHeads;
    std::int64_t work = 0;
    for (std::size_t i = 0; i < n_blocks; ++i)
      for (int s = 0; s < blocks[i].n_segments; ++s) work += blocks[i].segments[s].count * blocks[i].rows;
    work *= Heads * HeadDim * 2;
#pragma omp parallel if (work >= std::int64_t(kernels::kMinParallelWork))
    {
      static thread_local std::vector<State, xsimd::aligned_allocator<State, 64>> state(1);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t it = 0; it < items; ++it) run_one(blocks[it / KVHeads], static_cast<int>(it % KVHeads), state[0]);
    }
  }
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

}  // namespace streamllm
