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
  DynamicSinkWindowKVCache(std::int64_t sinks, std::int64_t window) : sinks_(sinks), window_(window) {
    if (sinks < 0 || window < 1)
      throw InputError("sink+window cache: " + std::to_string(sinks) + " sinks and a window of " + std::to_string(window) +
                       " (sinks >= 0, window >= 1)");
    if (sinks + window > Config::MaxSeq)
      throw InputError("sink+window cache: " + std::to_string(sinks) + " sinks + window " + std::to_string(window) +
                       " exceed the model's MaxSeq " + std::to_string(Config::MaxSeq));
    const auto s = static_cast<std::size_t>(sinks) * Config::KVDim * Config::Layers;
    const auto w = static_cast<std::size_t>(window) * Config::KVDim * Config::Layers;
    sink_k_.resize(s);
    sink_v_.resize(s);
    ring_k_.resize(w);
    ring_v_.resize(w);
  }

  typename KVCacheBase<Config>::Kind kind() const override { return KVCacheBase<Config>::Kind::SinkWindow; }
  std::int64_t sinks() const override { return sinks_; }
  std::int64_t window() const override { return window_; }
  std::int64_t capacity() const override { return sinks_ + window_; }
  // Until the ring wraps, window token p sits in slot p - S, as in a dense cache.
  bool can_truncate(std::int64_t n) const override { return n == this->size_ || this->size_ <= sinks_ + window_; }
  std::unique_ptr<KVCacheBase<Config>> empty_like(std::int64_t) const override {
    return std::make_unique<DynamicSinkWindowKVCache>(sinks_, window_);
  }
  std::vector<std::span<float>> state(std::int64_t n) override {
    std::vector<std::span<float>> out;
    const auto sinks = static_cast<std::size_t>(std::min(n, sinks_)) * Config::KVDim;
    const auto ring = static_cast<std::size_t>(std::clamp<std::int64_t>(n - sinks_, 0, window_)) * Config::KVDim;
    for (int l = 0; l < Config::Layers; ++l) {
      out.emplace_back(sink_k_.data() + sink_offset(l, 0), sinks);
      out.emplace_back(sink_v_.data() + sink_offset(l, 0), sinks);
      out.emplace_back(ring_k_.data() + ring_offset(l, 0), ring);
      out.emplace_back(ring_v_.data() + ring_offset(l, 0), ring);
    }
    return out;
  }
  std::size_t bytes() const override {
    return (sink_k_.size() + sink_v_.size() + ring_k_.size() + ring_v_.size()) * sizeof(float);
  }
  std::string describe() const override {
    return "sink+window KV cache (" + std::to_string(sinks_) + " sinks + " + std::to_string(window_) + " window)";
  }

  bool has_room(std::int64_t) const override { return true; }  // never runs out
  void check_room(std::int64_t) const override {}

  int segments(int layer, std::int64_t t, KVSegment* out) const override {
    int n = 0;
    const std::int64_t cached = this->size_;
    if (const std::int64_t s = std::min(sinks_, cached); s > 0)
      out[n++] = {sink_k_.data() + sink_offset(layer, 0), sink_v_.data() + sink_offset(layer, 0), Config::KVDim, s, true, 0};
    // Window tokens already cached: text positions [lo, cached), in the ring
    // from slot (lo - S) mod W, wrapping at most once.
    const std::int64_t lo = std::max(sinks_, t - window_ + 1);
    std::int64_t count = cached - lo;
    if (count <= 0) return n;
    std::int64_t slot = (lo - sinks_) % window_, pos = lo;
    while (count > 0) {
      const std::int64_t run = std::min(count, window_ - slot);
      out[n++] = {
          ring_k_.data() + ring_offset(layer, slot), ring_v_.data() + ring_offset(layer, slot), Config::KVDim, run, false, pos};
      count -= run;
      pos += run;
      slot = 0;
    }
    return n;
  }

  void store(int layer, std::int64_t pos, std::int64_t n, const float* k, const float* v, std::size_t ld) override {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t p = pos + i;
      std::size_t dst;
      if (p < sinks_) {
        dst = sink_offset(layer, p);
        copy(sink_k_.data() + dst, sink_v_.data() + dst, k, v, ld, i);
      } else if (p >= pos + n - window_) {  // earlier ones would be overwritten within this call
        dst = ring_offset(layer, (p - sinks_) % window_);
        copy(ring_k_.data() + dst, ring_v_.data() + dst, k, v, ld, i);
      }
    }
  }

 private:
  std::size_t sink_offset(int layer, std::int64_t i) const {
    return (static_cast<std::size_t>(layer) * static_cast<std::size_t>(sinks_) + static_cast<std::size_t>(i)) * Config::KVDim;
  }
  std::size_t ring_offset(int layer, std::int64_t slot) const {
    return (static_cast<std::size_t>(layer) * static_cast<std::size_t>(window_) + static_cast<std::size_t>(slot)) * Config::KVDim;
  }
  static void copy(float* kd, float* vd, const float* k, const float* v, std::size_t ld, std::int64_t i) {
    std::memcpy(kd, k + static_cast<std::size_t>(i) * ld, Config::KVDim * sizeof(float));
    std::memcpy(vd, v + static_cast<std::size_t>(i) * ld, Config::KVDim * sizeof(float));
  }

  std::int64_t sinks_, window_;
  AlignedVector<float> sink_k_, sink_v_;  // [layer][sink][kv_dim]
  AlignedVector<float> ring_k_, ring_v_;  // [layer][slot][kv_dim], slot = (pos - S) mod W
};

// Sizes in the type: a cache larger than the model's context does not compile.
template <class Config, int Sinks, int Window>
class SinkWindowKVCache final : public DynamicSinkWindowKVCache<Config> {
  static_assert(Sinks >= 0, "a sink+window cache needs Sinks >= 0");
  static_assert(Window >= 1, "a sink+window cache needs Window >= 1 (the token itself)");
  static_assert(Sinks + Window <= Config::MaxSeq, "Sinks + Window must not exceed the model's MaxSeq");

 public:
  SinkWindowKVCache() : DynamicSinkWindowKVCache<Config>(Sinks, Window) {}
};

}  // namespace streamllm
