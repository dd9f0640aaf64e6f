// Llama<Config>: the Llama 2 forward pass (Touvron et al. 2023) for a
// compile-time shape. It holds the weights and scratch space, never a cache:
// every call names the caches it reads and extends, so one model serves any
// number of sequences, and one call can run many of them (continuous batching).
// The scratch space makes a Llama one caller's at a time: threads that run
// passes concurrently each take their own, `Llama<Config> mine(model.weights())`,
// which shares the weights (views into one mapping) and costs only scratch.
// A second thread entering forward() while one runs gets an InputError, not
// a race on the scratch.
//
// Per layer, for all rows (tokens) of all sequences in the call at once:
//   xb = rmsnorm(x) * attn_norm
//   q, k, v = xb Wq^T, xb Wk^T, xb Wv^T;  RoPE on q and k
//   x += attention(q, cache + new keys) Wo^T
//   xb = rmsnorm(x) * ffn_norm
//   x += (silu(xb W1^T) * (xb W3^T)) W2^T
// and at the end logits = rmsnorm(x) * final_norm Wcls^T for the rows asked.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/kernels/matmul/matmul.hpp"
#include "streamllm/kernels/ops/attention.hpp"
#include "streamllm/kernels/ops/axpy.hpp"
#include "streamllm/kernels/ops/dequantize.hpp"
#include "streamllm/kernels/ops/hadamard.hpp"
#include "streamllm/kernels/ops/rmsnorm.hpp"
#include "streamllm/kernels/ops/rope.hpp"
#include "streamllm/kernels/ops/silu_gate.hpp"
#include "streamllm/model/shard_link.hpp"
#include "streamllm/model/weights.hpp"

namespace streamllm {

template <class Config>
class Llama {
 public:
  using Cache = KVCacheBase<Config>;
  // QD is D but in a shard of a model split across processes (shard/), which
  // holds only its own heads (and H then bounds its hidden slice).
  static constexpr std::size_t D = Config::Dim, H = Config::HiddenDim, QD = Config::QDim, KV = Config::KVDim,
                               HD = Config::HeadDim, V = Config::Vocab;

  // One sequence's part of a forward call: its cache and the tokens to append.
  using Sequence = ForwardSequence<Config>;

  // Logits of a forward call; valid until the next call on this model.
  class Logits {
   public:
    // Logits of token i of sequence s (i counts the tokens whose logits were asked).
    std::span<const float> row(std::size_t s, std::size_t i = 0) const { return {data_ + (first_[s] + i) * V, V}; }
    // Logits of the last token of sequence s.
    std::span<const float> last(std::size_t s) const { return row(s, first_[s + 1] - first_[s] - 1); }
    std::size_t rows(std::size_t s) const { return first_[s + 1] - first_[s]; }

   private:
    friend class Llama;
    const float* data_ = nullptr;
    const std::size_t* first_ = nullptr;
  };

  // Weights from the loaders come prepared for the kernels (prepare_weights,
  // weights.hpp: some repacked); weights built by hand run as they are.
  explicit Llama(ModelWeights<Config> weights);

  const ModelWeights<Config>& weights() const { return w_; }
  // Which weights these are (weights_fingerprint of the file's, before any
  // repacking): saved caches carry it.
  std::uint64_t fingerprint() const { return w_.fingerprint; }
  const HyperParams& hparams() const { return w_.hparams; }
  const kernels::Rope& rope() const { return rope_; }

  // A shard of a split model meets the other ranks' through `link` (which
  // outlives this model, or is unset before it goes): the layers' partial
  // sums, the logits, and on the first rank what each forward runs.
  void set_shard_link(ShardLink<Config>* link) { link_ = link; }

  // Longest run of tokens of one call that prefill() computes in one batched
  // pass; longer prompts are cut into chunks of this size.
  void set_max_chunk(std::size_t n) { max_chunk_ = std::max<std::size_t>(1, n); }
  std::size_t max_chunk() const { return max_chunk_; }

  // Called between the chunks of a long prefill: (tokens done, tokens in all).
  using Progress = std::function<void(std::size_t, std::size_t)>;

  // Appends the prompt to the cache, in batched passes of at most max_chunk()
  // tokens; returns the logits of its last token.
  std::span<const float> prefill(std::span<const TokenId> tokens, Cache& cache, const Progress& progress = {}) {
    if (tokens.empty()) throw InputError("prefill: the prompt is empty (at least one token, usually BOS)");
    check_tokens(tokens, 0);
    cache.check_room(static_cast<std::int64_t>(tokens.size()));
    std::span<const float> out;
    for (std::size_t i = 0; i < tokens.size(); i += max_chunk_) {
      const Sequence s{&cache, tokens.subspan(i, std::min(max_chunk_, tokens.size() - i)), false};
      out = forward({&s, 1}).last(0);
      if (progress) progress(std::min(tokens.size(), i + max_chunk_), tokens.size());
    }
    return out;
  }

  // Appends one token; returns its logits.
  std::span<const float> decode(TokenId token, Cache& cache) {
    const Sequence s{&cache, {&token, 1}, false};
    return forward({&s, 1}).last(0);
  }

  // One batched pass over every token of every sequence.
  Logits forward(std::span<const Sequence> seqs);

 private:
  struct Row {
    std::size_t seq;         // index of its sequence in the call
    std::int64_t pos;        // text position
    std::size_t first_row;   // first row of its sequence's chunk
    std::int64_t first_pos;  // text position of that first row
    TokenId token;
  };

  // Copies and moves of a Llama start idle, whatever the source was doing.
  struct InForwardFlag {
    std::atomic<bool> set{false};
    InForwardFlag() = default;
    InForwardFlag(const InForwardFlag&) {}
    InForwardFlag& operator=(const InForwardFlag&) { return *this; }
  };
  struct OneCallerAtATime {
    InForwardFlag& flag;
    explicit OneCallerAtATime(InForwardFlag& f) : flag(f) {
      if (flag.set.exchange(true, std::memory_order_acquire))
        throw InputError(
            "forward: this Llama is already running a pass on another thread; its scratch space is one "
            "caller's at a time: give each thread its own, Llama<Config> mine(model.weights()), which shares "
            "the weights");
    }
    ~OneCallerAtATime() { flag.set.store(false, std::memory_order_release); }
    OneCallerAtATime(const OneCallerAtATime&) = delete;
    OneCallerAtATime& operator=(const OneCallerAtATime&) = delete;
  };

  // A forward call the other ranks run too, from its start to its end.
  struct ShardedCall {
    ShardLink<Config>* link;
    ShardedCall(ShardLink<Config>* l, std::span<const Sequence> seqs) : link(l) {
      if (link) link->begin_forward(seqs);
    }
    ~ShardedCall() {
      if (link) link->end_forward();
    }
    ShardedCall(const ShardedCall&) = delete;
    ShardedCall& operator=(const ShardedCall&) = delete;
  };

  // A layer's output projection: every rank of a split model holds a part of the sum.
  // Token t's embedding row into x; a shard holds only its slice of the
  // vocabulary, and writes zeros for the others' tokens (forward sums them).
  void embed(TokenId t, float* x) const {
    const std::int64_t i = static_cast<std::int64_t>(t) - w_.first_token;
    if (i >= 0 && i < w_.token_embedding.rows)
      kernels::dequantize_row(w_.token_embedding, i, x);
    else
      std::fill_n(x, D, 0.0f);
  }

  void sum_over_ranks(float* x, std::size_t n) {
    if (link_) link_->sum(x, n);
  }

  static void check_tokens(std::span<const TokenId> tokens, std::size_t seq) {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= static_cast<TokenId>(V))
        throw InputError("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) + " of sequence " +
                         std::to_string(seq) + " is out of range [0, " + std::to_string(V) + ")");
  }

  // All checks before any state changes, so a bad call leaves every cache as it was.
  void validate(std::span<const Sequence> seqs) const {
    if constexpr (Config::QDim != Config::Dim)  // one shard of a split model: its sums are partial
      if (!link_)
        throw InputError(
            "forward: this model holds one shard of a model split across processes and has no link to the "
            "others (parallel::TensorParallelModel sets it); alone it computes partial sums, not logits");
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      if (!seqs[s].cache) throw InputError("forward: sequence " + std::to_string(s) + " has no cache");
      for (std::size_t o = 0; o < s; ++o)
        if (seqs[o].cache == seqs[s].cache)
          throw InputError("forward: sequences " + std::to_string(o) + " and " + std::to_string(s) + " share one cache");
      check_tokens(seqs[s].tokens, s);
      seqs[s].cache->check_room(static_cast<std::int64_t>(seqs[s].tokens.size()));
    }
  }

  void plan_rows(std::span<const Sequence> seqs) {
    rows_.clear();
    logit_rows_.clear();
    first_logit_.assign(1, 0);
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      const std::size_t first = rows_.size();
      const std::int64_t pos0 = seqs[s].cache->size();
      const std::size_t n = seqs[s].tokens.size();
      for (std::size_t i = 0; i < n; ++i) {
        rows_.push_back({s, pos0 + static_cast<std::int64_t>(i), first, pos0, seqs[s].tokens[i]});
        if (seqs[s].all_logits || i + 1 == n) logit_rows_.push_back(first + i);
      }
      first_logit_.push_back(logit_rows_.size());
    }
  }

  void grow_workspace(std::size_t R) {
    tl_ = static_cast<std::size_t>(rope_.table_len());
    grow(x_, R * D);
    grow(xb_, R * D);
    grow(q_, R * QD);
    grow(q_sink_, R * QD);
    grow(k_, R * KV);
    grow(v_, R * KV);
    grow(att_, R * QD);
    grow(hb_, R * hidden_);
    grow(hb2_, R * hidden_);
    grow(rope_cos_, R * tl_);
    grow(rope_sin_, R * tl_);
    grow(sink_cos_, R * tl_);
    grow(sink_sin_, R * tl_);
  }

  void layer(int l, std::span<const Sequence> seqs);

  // Blocks of up to kernels::AttentionBlock::kMaxRows consecutive rows of one
  // sequence, each with what its rows may see: the cached segments the cache
  // shows its first (earliest) row, and the new tokens of the sequence up to
  // its last row that the visibility rule keeps (sinks, and the window).
  // The attention kernel masks per row.
  void to_cache_types(std::size_t r, KVTypes types);
  void plan_attention(int l, std::span<const Sequence> seqs);

  Logits compute_logits();

  Logits logits_view() const {
    Logits out;
    out.data_ = logits_.data();
    out.first_ = first_logit_.data();
    return out;
  }

  ModelWeights<Config> w_;
  kernels::Rope rope_;
  std::size_t max_chunk_ = 512;
  std::size_t tl_ = 0;      // rope table length
  std::size_t hidden_ = 0;  // H, or the largest hidden slice of a shard's layers

  std::vector<Row> rows_;
  std::vector<std::size_t> logit_rows_, first_logit_;
  std::vector<kernels::AttentionBlock> att_blocks_;
  AlignedVector<float> x_, xb_, q_, q_sink_, k_, v_, att_, hb_, hb2_;
  AlignedVector<float> rope_cos_, rope_sin_, sink_cos_, sink_sin_;
  AlignedVector<float> logit_in_, logits_, shard_logits_;
  InForwardFlag in_forward_;
  ShardLink<Config>* link_ = nullptr;
};

// The passes are defined out of the class: members defined in it are inline,
// and an explicit instantiation declaration (extern template) does not stop a
// compiler from instantiating inline members to inline them. Out here, a
// program that instantiates Llama<Config> in one file and declares it extern in
// the others compiles the forward pass, and every kernel under it, once.
template <class Config>
Llama<Config>::Llama(ModelWeights<Config> weights)
    : w_(with_fingerprint(std::move(weights))),
      rope_(static_cast<int>(HD), w_.hparams.rope_theta,
            kernels::RopeScaling{w_.hparams.rope_freq_factors, w_.hparams.rope_position_scale, w_.hparams.rope_dims}) {
  for (const LayerWeights& l : w_.layers) hidden_ = std::max(hidden_, static_cast<std::size_t>(l.w_gate.rows));
}

template <class Config>
typename Llama<Config>::Logits Llama<Config>::forward(std::span<const Sequence> seqs) {
  const OneCallerAtATime guard(in_forward_);
  validate(seqs);
  const ShardedCall sharded(link_, seqs);
  plan_rows(seqs);
  const std::size_t R = rows_.size();
  if (R == 0) return logits_view();
  grow_workspace(R);

  for (std::size_t r = 0; r < R; ++r) {
    const Row& row = rows_[r];
    embed(row.token, x_.data() + r * D);
    rope_.table(row.pos, rope_cos_.data() + r * tl_, rope_sin_.data() + r * tl_);
    const std::int64_t shift = seqs[row.seq].cache->position_shift(row.pos);
    rope_.table(row.pos - shift, sink_cos_.data() + r * tl_, sink_sin_.data() + r * tl_);
  }
  if (link_) link_->sum_exact(x_.data(), R * D);
  for (int l = 0; l < Config::Layers; ++l) layer(l, seqs);
  for (const Sequence& s : seqs) s.cache->advance(static_cast<std::int64_t>(s.tokens.size()));
  return compute_logits();
}

template <class Config>
void Llama<Config>::layer(int l, std::span<const Sequence> seqs) {
  const LayerWeights& lw = w_.layers[static_cast<std::size_t>(l)];
  const std::size_t R = rows_.size();
  const auto h = static_cast<std::size_t>(lw.w_gate.rows);  // H, or a shard's slice of it
  const float eps = w_.hparams.rms_eps;

  for (std::size_t r = 0; r < R; ++r) kernels::rmsnorm(xb_.data() + r * D, x_.data() + r * D, lw.attn_norm, D, eps);
  const kernels::MatmulTarget qkv[] = {{&lw.wq, q_.data(), QD}, {&lw.wk, k_.data(), KV}, {&lw.wv, v_.data(), KV}};
  kernels::matmul_shared(qkv, xb_.data(), R, D);
  for (std::size_t r = 0; r < R; ++r) {
    // Sink keys are read with the query at its cache position: rotate a copy.
    std::memcpy(q_sink_.data() + r * QD, q_.data() + r * QD, QD * sizeof(float));
    kernels::rope_apply(q_sink_.data() + r * QD, QD, sink_cos_.data() + r * tl_, sink_sin_.data() + r * tl_, tl_);
    kernels::rope_apply(q_.data() + r * QD, QD, rope_cos_.data() + r * tl_, rope_sin_.data() + r * tl_, tl_);
    kernels::rope_apply(k_.data() + r * KV, KV, rope_cos_.data() + r * tl_, rope_sin_.data() + r * tl_, tl_);
    to_cache_types(r, seqs[rows_[r].seq].cache->types());
  }

  plan_attention(l, seqs);
  kernels::attend<Config::HeadDim, Config::Heads, Config::KVHeads>(att_blocks_.data(), att_blocks_.size());
  for (std::size_t r = 0; r < R; ++r)
    if (kv_rotated(seqs[rows_[r].seq].cache->types().v)) kernels::hadamard_heads(att_.data() + r * QD, QD, HD);

  // The new keys and values join the caches only now: until every row of
  // this layer has attended, a window cache may still need what they replace.
  for (std::size_t r = 0; r < R; ++r) {
    const Row& row = rows_[r];
    if (r != row.first_row) continue;
    const auto n = static_cast<std::int64_t>(seqs[row.seq].tokens.size());
    seqs[row.seq].cache->store(l, row.first_pos, n, k_.data() + r * KV, v_.data() + r * KV, KV);
  }

  kernels::matmul(lw.wo, att_.data(), R, QD, xb_.data(), D);
  sum_over_ranks(xb_.data(), R * D);
  for (std::size_t r = 0; r < R; ++r) kernels::add_inplace(x_.data() + r * D, xb_.data() + r * D, D);

  for (std::size_t r = 0; r < R; ++r) kernels::rmsnorm(xb_.data() + r * D, x_.data() + r * D, lw.ffn_norm, D, eps);
  const kernels::MatmulTarget gate_up[] = {{&lw.w_gate, hb_.data(), h}, {&lw.w_up, hb2_.data(), h}};
  kernels::matmul_shared(gate_up, xb_.data(), R, D);
  kernels::silu_gate(hb_.data(), hb2_.data(), R * h);
  kernels::matmul(lw.w_down, hb_.data(), R, h, xb_.data(), D);
  sum_over_ranks(xb_.data(), R * D);
  for (std::size_t r = 0; r < R; ++r) kernels::add_inplace(x_.data() + r * D, xb_.data() + r * D, D);
}

// Row r's keys, values and queries as its cache holds and reads them:
// rotated where the cache's type is stored rotated (quant/kv_types.hpp), and
// the new keys and values rounded to the type, so that they are attended to
// in this call as they will be in every later one.
template <class Config>
void Llama<Config>::to_cache_types(std::size_t r, KVTypes types) {
  if (kv_rotated(types.k)) {
    kernels::hadamard_heads(q_.data() + r * QD, QD, HD);
    kernels::hadamard_heads(q_sink_.data() + r * QD, QD, HD);
    kernels::hadamard_heads(k_.data() + r * KV, KV, HD);
  }
  if (kv_rotated(types.v)) kernels::hadamard_heads(v_.data() + r * KV, KV, HD);
  kv_round_trip(types.k, k_.data() + r * KV, KV);
  kv_round_trip(types.v, v_.data() + r * KV, KV);
}

template <class Config>
void Llama<Config>::plan_attention(int l, std::span<const Sequence> seqs) {
  att_blocks_.clear();
  for (std::size_t r0 = 0; r0 < rows_.size();) {
    const Row& row = rows_[r0];
    const Cache& cache = *seqs[row.seq].cache;
    std::size_t r1 = r0 + 1;
    while (r1 < rows_.size() && rows_[r1].seq == row.seq && r1 - r0 < kernels::AttentionBlock::kMaxRows) ++r1;
    kernels::AttentionBlock b;
    b.q = q_.data() + r0 * QD;
    b.q_sink = q_sink_.data() + r0 * QD;
    b.out = att_.data() + r0 * QD;
    b.ld = QD;
    b.first_pos = row.pos;
    b.rows = static_cast<int>(r1 - r0);
    b.sinks = cache.sinks();
    b.window = cache.window();
    b.n_segments = cache.segments(l, row.pos, b.segments);
    const std::int64_t S = b.sinks, W = b.window, c0 = row.first_pos, t_first = row.pos, t_last = rows_[r1 - 1].pos;
    auto add_new = [&](std::int64_t p0, std::int64_t p1, bool sink) {  // positions [p0, p1)
      if (p1 <= p0) return;
      const std::size_t off = row.first_row + static_cast<std::size_t>(p0 - c0);
      b.segments[b.n_segments++] = KVSegment::f32(k_.data() + off * KV, v_.data() + off * KV, KV, p1 - p0, sink, p0);
    };
    add_new(c0, std::min(S, t_last + 1), true);
    add_new(std::max({c0, S, t_first - W + 1}), t_last + 1, false);
    att_blocks_.push_back(b);
    r0 = r1;
  }
}

template <class Config>
typename Llama<Config>::Logits Llama<Config>::compute_logits() {
  const std::size_t NL = logit_rows_.size();
  grow(logit_in_, NL * D);
  grow(logits_, NL * V);
  for (std::size_t i = 0; i < NL; ++i)
    kernels::rmsnorm(logit_in_.data() + i * D, x_.data() + logit_rows_[i] * D, w_.final_norm, D, w_.hparams.rms_eps);
  if (!link_) {
    kernels::matmul(w_.classifier, logit_in_.data(), NL, D, logits_.data(), V);
    return logits_view();
  }
  // A shard's rows of the classifier (its slice of the vocabulary, or none).
  const auto cols = static_cast<std::size_t>(w_.classifier.rows);
  grow(shard_logits_, NL * cols);
  if (cols > 0) kernels::matmul(w_.classifier, logit_in_.data(), NL, D, shard_logits_.data(), cols);
  link_->gather_logits(shard_logits_.data(), NL, cols, logits_.data());
  return logits_view();
}

}  // namespace streamllm
