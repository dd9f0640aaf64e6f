// StreamingLLM's cache (Xiao et al. 2023, "Efficient Streaming Language
// Models with Attention Sinks"): the first S tokens are kept forever (the
// attention sinks) and the last W in a ring, so memory is fixed at S + W
// positions however long the stream runs.
//
// Rule (../shared/DESIGN.md): token t attends to the sinks {0..S-1} and the
// window {t-W+1..t}. While t < S+W positions are text positions; after that
// they are positions in the cache: sink i at i, window token t-W+1+j at S+j,
// the query at S+W-1.
//
// How positions stay right without rewriting the window: window keys are
// rotated once, at their text position, when computed. Window tokens are
// consecutive, so their distance to the query is the same in text and cache
// positions, and the query rotated at its text position t scores them
// exactly as the rule says. Only the sinks need the query at its cache
// position, t - position_shift(t): the model rotates a second copy of the
// query for them (segments flagged `sink`). Per token and layer that costs
// O(heads x head_dim), whatever S and W are; nothing in the ring is touched.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "streamllm/cache/kv_cache.hpp"

namespace streamllm {

// Sizes chosen at run time (e.g. from a command line); checked on construction.
template <class Config>
class DynamicSinkWindowKVCache : public KVCacheBase<Config> {
 public:
  DynamicSinkWindowKVCache(std::int64_t sinks, std::int64_t window, KVTypes types = {})
      : KVCacheBase<Config>(types), sinks_(sinks), window_(window) {
    if (sinks < 0 || window < 1)
      throw InputError("sink+window cache: " + std::to_string(sinks) + " sinks and a window of " + std::to_string(window) +
                       " (sinks >= 0, window >= 1)");
    if (sinks + window > Config::MaxSeq)
      throw InputError("sink+window cache: " + std::to_string(sinks) + " sinks + window " + std::to_string(window) +
                       " exceed the model's MaxSeq " + std::to_string(Config::MaxSeq));
    this->check_types();
    const auto s = static_cast<std::size_t>(sinks) * Config::Layers, w = static_cast<std::size_t>(window) * Config::Layers;
    sink_k_.resize(s * this->k_row());
    sink_v_.resize(s * this->v_row());
    ring_k_.resize(w * this->k_row());
    ring_v_.resize(w * this->v_row());
  }

  typename KVCacheBase<Config>::Kind kind() const override { return KVCacheBase<Config>::Kind::SinkWindow; }
  std::int64_t sinks() const override { return sinks_; }
  std::int64_t window() const override { return window_; }
  std::int64_t capacity() const override { return sinks_ + window_; }
  // Until the ring wraps, window token p sits in slot p - S, as in a dense cache.
  bool can_truncate(std::int64_t n) const override { return n == this->size_ || this->size_ <= sinks_ + window_; }
  std::unique_ptr<KVCacheBase<Config>> empty_like(std::int64_t) const override {
    return std::make_unique<DynamicSinkWindowKVCache>(sinks_, window_, this->types());
  }
  std::vector<std::span<std::byte>> state(std::int64_t n) override {
    std::vector<std::span<std::byte>> out;
    const auto sinks = static_cast<std::size_t>(std::min(n, sinks_));
    const auto ring = static_cast<std::size_t>(std::clamp<std::int64_t>(n - sinks_, 0, window_));
    for (int l = 0; l < Config::Layers; ++l) {
      out.emplace_back(sink_k_.data() + sink_index(l, 0) * this->k_row(), sinks * this->k_row());
      out.emplace_back(sink_v_.data() + sink_index(l, 0) * this->v_row(), sinks * this->v_row());
      out.emplace_back(ring_k_.data() + ring_index(l, 0) * this->k_row(), ring * this->k_row());
      out.emplace_back(ring_v_.data() + ring_index(l, 0) * this->v_row(), ring * this->v_row());
    }
    return out;
  }
  std::size_t bytes() const override { return sink_k_.size() + sink_v_.size() + ring_k_.size() + ring_v_.size(); }
  std::string describe() const override {
    return "sink+window KV cache (" + std::to_string(sinks_) + " sinks + " + std::to_string(window_) + " window" +
           (this->types() == KVTypes{} ? "" : ", " + kv_types_name(this->types())) + ")";
  }

  bool has_room(std::int64_t) const override { return true; }  // never runs out
  void check_room(std::int64_t) const override {}

  int segments(int layer, std::int64_t t, KVSegment* out) const override {
    int n = 0;
    const std::int64_t cached = this->size_;
    if (const std::int64_t s = std::min(sinks_, cached); s > 0)
      out[n++] = segment(sink_k_, sink_v_, sink_index(layer, 0), s, true, 0);
    // Window tokens already cached: text positions [lo, cached), in the ring
    // from slot (lo - S) mod W, wrapping at most once.
    const std::int64_t lo = std::max(sinks_, t - window_ + 1);
    std::int64_t count = cached - lo;
    if (count <= 0) return n;
    std::int64_t slot = (lo - sinks_) % window_, pos = lo;
    while (count > 0) {
      const std::int64_t run = std::min(count, window_ - slot);
      out[n++] = segment(ring_k_, ring_v_, ring_index(layer, slot), run, false, pos);
      count -= run;
      pos += run;
      slot = 0;
    }
    return n;
  }

  void store(int layer, std::int64_t pos, std::int64_t n, const float* k, const float* v, std::size_t ld) override {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t p = pos + i;
      const auto row = static_cast<std::size_t>(i);
      if (p < sinks_) {
        const std::size_t at = sink_index(layer, p);
        this->encode(k, v, ld, row, sink_k_.data() + at * this->k_row(), sink_v_.data() + at * this->v_row());
      } else if (p >= pos + n - window_) {  // earlier ones would be overwritten within this call
        const std::size_t at = ring_index(layer, (p - sinks_) % window_);
        this->encode(k, v, ld, row, ring_k_.data() + at * this->k_row(), ring_v_.data() + at * this->v_row());
      }
    }
  }

 private:
  // Which row of the sinks' (or the ring's) buffers holds sink i (slot) of a layer.
  std::size_t sink_index(int layer, std::int64_t i) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(sinks_) + static_cast<std::size_t>(i);
  }
  std::size_t ring_index(int layer, std::int64_t slot) const {
    return static_cast<std::size_t>(layer) * static_cast<std::size_t>(window_) + static_cast<std::size_t>(slot);
  }
  KVSegment segment(const AlignedVector<std::byte>& k, const AlignedVector<std::byte>& v, std::size_t row, std::int64_t count,
                    bool sink, std::int64_t first_pos) const {
    return {k.data() + row * this->k_row(), v.data() + row * this->v_row(), this->k_row(), this->v_row(), this->types(), count,
            sink, first_pos};
  }

  std::int64_t sinks_, window_;
  AlignedVector<std::byte> sink_k_, sink_v_;  // [layer][sink] rows of the keys' (values') type
  AlignedVector<std::byte> ring_k_, ring_v_;  // [layer][slot] rows, slot = (pos - S) mod W
};

// Sizes in the type: a cache larger than the model's context does not compile.
template <class Config, int Sinks, int Window, KVType K = KVType::F32, KVType V = K>
class SinkWindowKVCache final : public DynamicSinkWindowKVCache<Config> {
  static_assert(Sinks >= 0, "a sink+window cache needs Sinks >= 0");
  static_assert(Window >= 1, "a sink+window cache needs Window >= 1 (the token itself)");
  static_assert(Sinks + Window <= Config::MaxSeq, "Sinks + Window must not exceed the model's MaxSeq");

 public:
  SinkWindowKVCache() : DynamicSinkWindowKVCache<Config>(Sinks, Window, KVTypes{K, V}) {}
};

}  // namespace streamllm
