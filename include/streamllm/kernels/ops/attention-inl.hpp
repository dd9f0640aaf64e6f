// The attention tiles over Vec (attention.hpp says what they compute),
// compiled once per kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

template <int HeadDim, int Heads, int KVHeads>
struct Attention {
  static constexpr int kGroup = Heads / KVHeads;
  static constexpr int kQueries = AttentionBlock::kMaxRows * kGroup;
  static constexpr std::size_t L = kLanes;
  static constexpr bool kVectorDot = HeadDim % L == 0;  // else scores one by one
  using Mask = typename Vec::batch_bool_type;

  // Keys per block on the head-tile path: two vectors, so that each
  // broadcast of a query element feeds two fmas (one per key vector) and the
  // softmax's horizontal maximum and sum are paid once per 2L keys.
  static constexpr std::size_t kTileKeys = 2 * L;

  // Per query: running max, running sum (lane by lane: summed once, at the
  // end), and the weighted sum of values.
  struct State {
    float m[kQueries];
    alignas(64) float l[kQueries][L];
    alignas(64) float acc[kQueries][HeadDim];
    // A block of keys and of values of a compact cache, as floats.
    alignas(64) float k[kTileKeys][HeadDim];
    alignas(64) float v[kTileKeys][HeadDim];
  };

  // How far (in log space) a score may pass the running maximum before the
  // maximum moves: a block whose scores stay within it (nearly all, once the
  // first blocks have set the maximum) needs no horizontal maximum and no
  // rescaling, one vector compare instead. The result is the same: any
  // maximum cancels between the weights and their sum; this one keeps every
  // weight below e^8, far from float's range.
  static constexpr float kMaxMargin = 8.0f;

  // How a block of keys is read (run_one chooses per block of rows):
  // - ByRows: each key as it is in the cache, a vector dot per key (or, for
  //   heads narrower than a vector, one by one);
  // - ByLanes: the block transposed first so that its keys lie along the
  //   lanes: one broadcast and fma per dimension, no horizontal sums. That
  //   pays off once many queries read the block (a prefill block: up to 16
  //   rows x kGroup heads); heads narrower than a vector have no vector dot
  //   at all, so for them it is the only vector form;
  // - HeadTiles: the same, two vectors of keys at a time, for kHeadTile heads
  //   of a row together.
  enum class KeyLayout { ByRows, ByLanes, HeadTiles };
  static constexpr int kQueriesToTranspose = 16;
  static constexpr bool kCanTranspose = HeadDim % 4 == 0;

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

  static KeyLayout key_layout(int queries) {
    if (!kCanTranspose || queries < kQueriesToTranspose) return KeyLayout::ByRows;
    return kHeadTile > 1 ? KeyLayout::HeadTiles : KeyLayout::ByLanes;
  }

  // ---- scores --------------------------------------------------------------

  // One query against the keys of one block (nk <= L of them), key by key.
  static Vec scores(const float* q, const float* k, std::size_t stride, std::size_t nk) {
    if constexpr (kVectorDot) {
      Vec qv[HeadDim / L];
      for (std::size_t v = 0; v < HeadDim / L; ++v) qv[v] = load(q + v * L);
      Vec partial[L];
      for (std::size_t j = 0; j < L; ++j) {
        Vec s(0.f);
        if (j < nk)
          for (std::size_t v = 0; v < HeadDim / L; ++v) s = fma(qv[v], load(k + j * stride + v * L), s);
        partial[j] = s;
      }
      return sum_each(partial);  // lane j: the sum of partial[j]
    } else {
      alignas(64) float s[L] = {};
      for (std::size_t j = 0; j < nk; ++j) s[j] = dot(q, k + j * stride, HeadDim);
      return Vec::load_aligned(s);
    }
  }

  // The same from the block's keys along the lanes (kt[d][j] = key j,
  // dimension d; lanes past a partial block's keys hold zeros or an earlier
  // block's keys, which the caller masks).
  static Vec scores_by_lanes(const float* q, const float (*kt)[L]) {
    static_assert(kCanTranspose);
    Vec s0(0.f), s1(0.f), s2(0.f), s3(0.f);  // four chains hide the fma latency
    for (std::size_t d = 0; d < static_cast<std::size_t>(HeadDim); d += 4) {
      s0 = fma(Vec(q[d]), Vec::load_aligned(kt[d]), s0);
      s1 = fma(Vec(q[d + 1]), Vec::load_aligned(kt[d + 1]), s1);
      s2 = fma(Vec(q[d + 2]), Vec::load_aligned(kt[d + 2]), s2);
      s3 = fma(Vec(q[d + 3]), Vec::load_aligned(kt[d + 3]), s3);
    }
    return (s0 + s1) + (s2 + s3);
  }

  // ---- the online softmax and the values -----------------------------------

  // One query's online softmax over one key block: from its scores s
  // (invisible lanes -inf), the keys' weights p; the running sum updated,
  // and, when a score passes the maximum by more than kMaxMargin, the
  // maximum moved and what was accumulated under the old one rescaled.
  // N vectors of keys at once: one compare for all.
  template <std::size_t N>
  static void softmax_step(const Vec (&s)[N], const Mask (&visible)[N], State& st, int qi, float* p) {
    Vec mx = s[0];
    for (std::size_t i = 1; i < N; ++i) mx = max(mx, s[i]);
    if (any(mx > Vec(st.m[qi] + kMaxMargin))) {
      alignas(64) float sv[L];
      mx.store_aligned(sv);
      const float bm = *std::max_element(sv, sv + L);
      const float corr = std::exp(st.m[qi] - bm);
      (Vec::load_aligned(st.l[qi]) * Vec(corr)).store_aligned(st.l[qi]);
      for (int d = 0; d < HeadDim; ++d) st.acc[qi][d] *= corr;
      st.m[qi] = bm;
    }
    Vec sum = Vec::load_aligned(st.l[qi]);
    for (std::size_t i = 0; i < N; ++i) {
      const Vec e = select(visible[i], exp(s[i] - Vec(st.m[qi])), Vec(0.f));
      e.store_aligned(p + i * L);
      sum += e;
    }
    sum.store_aligned(st.l[qi]);
  }

  // One query's weighted values: acc += sum of p[j] v[j] over the visible
  // keys [lo, hi] of the block vb.
  static void add_weighted_values(const float* p, std::size_t lo, std::size_t hi, const float* vb, std::size_t stride,
                                  float* acc) {
    if constexpr (kVectorDot) {
      // The running sum stays in registers across the block's keys, even and
      // odd keys in separate sums: one chain of fmas per vector would wait on
      // its latency at every key.
      Vec even[HeadDim / L], odd[HeadDim / L];
      for (std::size_t d = 0; d < HeadDim / L; ++d) {
        even[d] = load(acc + d * L);
        odd[d] = Vec(0.f);
      }
      std::size_t j = lo;
      for (; j + 1 <= hi; j += 2) {
        const Vec pj(p[j]), pk(p[j + 1]);
        const float* v = vb + j * stride;
        for (std::size_t d = 0; d < HeadDim / L; ++d) {
          even[d] = fma(pj, load(v + d * L), even[d]);
          odd[d] = fma(pk, load(v + stride + d * L), odd[d]);
        }
      }
      if (j == hi)
        for (std::size_t d = 0; d < HeadDim / L; ++d) even[d] = fma(Vec(p[j]), load(vb + j * stride + d * L), even[d]);
      for (std::size_t d = 0; d < HeadDim / L; ++d) store(acc + d * L, even[d] + odd[d]);
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

  // ---- one block of keys -----------------------------------------------------

  // A block of keys of one segment as every row of a block reads it: the
  // keys (for ByLanes and HeadTiles transposed into kt or kt2), the values,
  // the text position of its first key.
  struct KeyBlock {
    const float* k;
    const float* v;
    std::size_t k_stride, v_stride, count;  // strides in floats
    std::int64_t first_pos;
  };
  // The transposed keys: kt for ByLanes (L keys), kt2 for HeadTiles (2L).
  struct Transposed {
    alignas(64) float kt[kCanTranspose ? HeadDim : 1][L];
    alignas(64) float kt2[kHeadTile > 1 ? HeadDim : 1][kTileKeys];
  };

  // The keys a row at text position t sees in a block: lanes [lo, hi].
  struct Visible {
    std::int64_t lo, hi;
    bool empty() const { return hi < lo; }
  };
  static Visible visible_keys(const AttentionBlock& b, std::int64_t t, const KeyBlock& kb) {
    const std::int64_t p0 = kb.first_pos;
    // Visible lanes j: p0 + j <= t, and (a sink, or inside the window).
    return {p0 < b.sinks ? 0 : std::max<std::int64_t>(0, t - b.window + 1 - p0),
            std::min<std::int64_t>(static_cast<std::int64_t>(kb.count) - 1, t - p0)};
  }
  // Which lanes of a vector of keys (at positions jpos in the block) are in [lo, hi].
  static Mask lanes_inside(Vec jpos, Visible r) {
    return (jpos >= Vec(static_cast<float>(r.lo))) & (jpos <= Vec(static_cast<float>(r.hi)));
  }

  // One query head against a block of keys: scores, online softmax, weighted
  // values; p is scratch for the keys' weights.
  static void attend_head(KeyLayout layout, const float* q, const KeyBlock& kb, const Transposed& t, Mask visible, Visible r,
                          State& st, int qi, float* p) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    Vec raw;
    if constexpr (kCanTranspose)
      raw = layout == KeyLayout::ByLanes ? scores_by_lanes(q, t.kt) : scores(q, kb.k, kb.k_stride, kb.count);
    else
      raw = scores(q, kb.k, kb.k_stride, kb.count);
    const Vec scored[1] = {select(visible, raw * Vec(scale), Vec(-std::numeric_limits<float>::infinity()))};
    const Mask vis[1] = {visible};
    softmax_step(scored, vis, st, qi, p);
    add_weighted_values(p, static_cast<std::size_t>(r.lo), static_cast<std::size_t>(r.hi), kb.v, kb.v_stride, st.acc[qi]);
  }

  // G heads of one row (queries qi0.., q[g] their vectors) against a block of
  // kTileKeys keys along the lanes (kt2) and its values: the online softmax
  // and weighted sums of attend_head, each key vector and value row loaded
  // once for all G.
  template <int G>
  static void attend_heads(const float* const (&q)[G], const KeyBlock& kb, const float (*kt)[kTileKeys], const Mask (&visible)[2],
                           Visible r, State& st, int qi0) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(HeadDim));
    const Vec neg_inf(-std::numeric_limits<float>::infinity());
    Vec s[G][2];  // per head, the two key vectors: independent chains
    for (int g = 0; g < G; ++g) s[g][0] = s[g][1] = Vec(0.f);
    for (std::size_t d = 0; d < static_cast<std::size_t>(HeadDim); ++d) {
      Vec k0 = Vec::load_aligned(kt[d]), k1 = Vec::load_aligned(kt[d] + L);
      in_register(k0);
      in_register(k1);
      for (int g = 0; g < G; ++g) {
        const Vec qd(q[g][d]);
        s[g][0] = fma(qd, k0, s[g][0]);
        s[g][1] = fma(qd, k1, s[g][1]);
      }
    }
    alignas(64) float p[G][kTileKeys];
    for (int g = 0; g < G; ++g) {
      const Vec scores[2] = {select(visible[0], s[g][0] * Vec(scale), neg_inf),
                             select(visible[1], s[g][1] * Vec(scale), neg_inf)};
      softmax_step(scores, visible, st, qi0 + g, p[g]);
    }
    Vec a[G][HeadDim / L];
    for (int g = 0; g < G; ++g)
      for (std::size_t d = 0; d < HeadDim / L; ++d) a[g][d] = load(st.acc[qi0 + g] + d * L);
    for (auto j = static_cast<std::size_t>(r.lo); j <= static_cast<std::size_t>(r.hi); ++j) {
      const float* v = kb.v + j * kb.v_stride;
      for (std::size_t d = 0; d < HeadDim / L; ++d) {
        Vec vv = load(v + d * L);
        in_register(vv);
        for (int g = 0; g < G; ++g) a[g][d] = fma(Vec(p[g][j]), vv, a[g][d]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (std::size_t d = 0; d < HeadDim / L; ++d) store(st.acc[qi0 + g] + d * L, a[g][d]);
  }

  // The query heads of kv head kvh in one row (qrow: the row's queries)
  // against one block of keys, of which it sees lanes r (jpos: the lanes'
  // positions in the block, 0 .. L - 1).
  static void attend_row(KeyLayout layout, const float* qrow, const KeyBlock& kb, const Transposed& t, Vec jpos, Visible r,
                         State& st, int qi0) {
    const Mask visible = lanes_inside(jpos, r);
    if constexpr (kHeadTile > 1) {
      if (layout == KeyLayout::HeadTiles) {
        const Mask both[2] = {visible, lanes_inside(jpos + Vec(static_cast<float>(L)), r)};
        for (int h = 0; h < kGroup; h += kHeadTile) {
          const float* q[kHeadTile];
          for (int g = 0; g < kHeadTile; ++g) q[g] = qrow + static_cast<std::size_t>((h + g) * HeadDim);
          attend_heads<kHeadTile>(q, kb, t.kt2, both, r, st, qi0 + h);
        }
        return;
      }
    }
    alignas(64) float p[L];
    for (int h = 0; h < kGroup; ++h)
      attend_head(layout, qrow + static_cast<std::size_t>(h * HeadDim), kb, t, visible, r, st, qi0 + h, p);
  }

  // ---- compact caches ----------------------------------------------------------

  // Elements [first, first + HeadDim) of a row of type t as floats. The
  // vector forms read whole vectors: L divides 32, so none straddles a block.
  static void row_to_f32(KVType t, const std::byte* row, std::size_t first, float* out) {
    if constexpr (HeadDim % L == 0) {
      const auto* h = reinterpret_cast<const std::uint16_t*>(row) + first;
      switch (t) {
        case KVType::F32: break;
        case KVType::F16:
          for (std::size_t d = 0; d < HeadDim; d += L) store(out + d, load_f16(h + d));
          return;
        case KVType::BF16:
          for (std::size_t d = 0; d < HeadDim; d += L) store(out + d, load_bf16(h + d));
          return;
        case KVType::Q8_0: {
          const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(row);
          Vec scale(0.f);
          for (std::size_t d = 0; d < HeadDim; d += L) {
            const std::size_t e = first + d, j = e % quant::kQK;
            const quant::BlockQ8_0& b = blocks[e / quant::kQK];
            if (d == 0 || j == 0) scale = Vec(f16_scalar(b.d));
            store(out + d, scale * load_i8(b.qs + j));
          }
          return;
        }
        case KVType::Q4_0: {
          const auto* blocks = reinterpret_cast<const quant::BlockQ4_0*>(row);
          Vec scale(0.f);
          for (std::size_t d = 0; d < HeadDim; d += L) {
            const std::size_t e = first + d, j = e % quant::kQK, half = quant::kQK / 2;
            const quant::BlockQ4_0& b = blocks[e / quant::kQK];
            if (d == 0 || j == 0) scale = Vec(f16_scalar(b.d));
            store(out + d, scale * load_nibbles(b.qs + j % half, j >= half));
          }
          return;
        }
      }
    }
    kv_decode(t, row, first, HeadDim, out);
  }

  // n rows of a segment's keys or values (stride bytes apart), the head's
  // elements from `first`, as floats: f32 rows where they are, any other
  // type converted into buf, once per block of keys for every row and head
  // of the block that reads them.
  // (Not inlined: a call per block of keys costs nothing, and the tiles
  // around it stay as GCC inlined them before.)
  [[gnu::noinline]] static const float* float_rows(KVType t, const std::byte* rows, std::size_t stride, std::size_t n,
                                                   std::size_t first, float (*buf)[HeadDim], std::size_t& float_stride) {
    if (t == KVType::F32) {
      float_stride = stride / sizeof(float);
      return reinterpret_cast<const float*>(rows) + first;
    }
    for (std::size_t j = 0; j < n; ++j) row_to_f32(t, rows + j * stride, first, buf[j]);
    float_stride = HeadDim;
    return buf[0];
  }

  // ---- a block of rows --------------------------------------------------------

  // The running state of nq queries before any key.
  static void begin(State& st, int nq) {
    for (int i = 0; i < nq; ++i) {
      st.m[i] = -std::numeric_limits<float>::infinity();
      std::fill_n(st.l[i], L, 0.0f);
      std::fill_n(st.acc[i], HeadDim, 0.0f);
    }
  }

  // The block's rows normalised into its output: the query heads of kv head kvh.
  static void finish(const AttentionBlock& b, int kvh, const State& st) {
    for (int r = 0; r < b.rows; ++r)
      for (int h = 0; h < kGroup; ++h) {
        const int qi = r * kGroup + h;
        float* out = b.out + static_cast<std::size_t>(r) * b.ld + static_cast<std::size_t>((kvh * kGroup + h) * HeadDim);
        const float inv = 1.0f / hadd(Vec::load_aligned(st.l[qi]));
        for (int d = 0; d < HeadDim; ++d) out[d] = st.acc[qi][d] * inv;
      }
  }

  // One block of rows, the query heads of kv head kvh: every block of keys of
  // every segment, each read (and transposed) once for all the rows and heads
  // that see it.
  static void run_one(const AttentionBlock& b, int kvh, State& st) {
    begin(st, b.rows * kGroup);
    const KeyLayout layout = key_layout(b.rows * kGroup);
    const std::size_t block_keys = layout == KeyLayout::HeadTiles ? kTileKeys : L;
    Transposed t;
    // Lanes past a partial block's keys must hold finite values (masked).
    if (layout == KeyLayout::HeadTiles)
      std::fill_n(&t.kt2[0][0], sizeof(t.kt2) / sizeof(float), 0.0f);
    else if (layout == KeyLayout::ByLanes)
      std::fill_n(&t.kt[0][0], sizeof(t.kt) / sizeof(float), 0.0f);
    alignas(64) float lane_pos[L];
    for (std::size_t j = 0; j < L; ++j) lane_pos[j] = static_cast<float>(j);
    const Vec jpos = Vec::load_aligned(lane_pos);
    const std::int64_t last_pos = b.first_pos + b.rows - 1;
    for (int si = 0; si < b.n_segments; ++si) {
      const KVSegment& seg = b.segments[si];
      const float* qbase = seg.sink ? b.q_sink : b.q;
      for (std::int64_t j0 = 0; j0 < seg.count; j0 += static_cast<std::int64_t>(block_keys)) {
        if (seg.first_pos + j0 > last_pos) break;  // causal: no row sees these (positions only grow along a segment)
        KeyBlock kb;
        kb.count = static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(block_keys), seg.count - j0));
        kb.first_pos = seg.first_pos + j0;
        const auto j = static_cast<std::size_t>(j0);
        const std::size_t first = static_cast<std::size_t>(kvh) * HeadDim;
        kb.k = float_rows(seg.types.k, seg.k + j * seg.k_stride, seg.k_stride, kb.count, first, st.k, kb.k_stride);
        kb.v = float_rows(seg.types.v, seg.v + j * seg.v_stride, seg.v_stride, kb.count, first, st.v, kb.v_stride);
        if (layout == KeyLayout::HeadTiles)
          transpose(kb.k, kb.k_stride, kb.count, static_cast<std::size_t>(HeadDim), &t.kt2[0][0], kTileKeys);
        else if (layout == KeyLayout::ByLanes)
          transpose(kb.k, kb.k_stride, kb.count, static_cast<std::size_t>(HeadDim), &t.kt[0][0], L);
        for (int row = 0; row < b.rows; ++row) {
          const Visible r = visible_keys(b, b.first_pos + row, kb);
          if (r.empty()) continue;
          const float* qrow = qbase + static_cast<std::size_t>(row) * b.ld + static_cast<std::size_t>(kvh * kGroup * HeadDim);
          attend_row(layout, qrow, kb, t, jpos, r, st, row * kGroup);
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
    parallel_chunks(static_cast<std::size_t>(items), 1, static_cast<std::size_t>(work), [&](std::size_t i0, std::size_t i1) {
      static thread_local std::vector<State, xsimd::aligned_allocator<State, 64>> state(1);
      constexpr auto kv = static_cast<std::size_t>(KVHeads);
      for (std::size_t it = i0; it < i1; ++it) run_one(blocks[it / kv], static_cast<int>(it % kv), state[0]);
    });
  }
};

}  // namespace streamllm::kernels::STREAMLLM_ISA
