// KV caches: what a query may attend to. The model asks a cache for the
// segments of cached keys and values that a query at text position t sees,
// and hands it the new tokens' keys and values after each layer. The model
// never owns a cache: one model serves any number of them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/kernels/ops/kv_segment.hpp"

namespace streamllm {

template <class Config>
class KVCacheBase {
 public:
  enum class Kind { Dense, SinkWindow };

  // The other processes' parts of this cache, when the model is split across
  // processes (tensor parallel, parallel/): they hold the same tokens' keys
  // and values of their own heads, and follow this cache's size at every
  // forward. A copy or the end of this cache is what they must be told of.
  class Mirror {
   public:
    virtual ~Mirror() = default;
    // `to` now holds the first n tokens of the cache mirrored as `from_id`.
    virtual void copied(std::uint64_t from_id, KVCacheBase& to, std::int64_t n) = 0;
    virtual void dropped(std::uint64_t id) noexcept = 0;
  };

  KVCacheBase() = default;
  // A copy is a cache of its own, which no other process mirrors yet.
  KVCacheBase(const KVCacheBase& other) : size_(other.size_) {}
  KVCacheBase& operator=(const KVCacheBase& other) {
    if (this != &other) {
      unmirror();
      size_ = other.size_;
    }
    return *this;
  }
  virtual ~KVCacheBase() { unmirror(); }
  virtual Kind kind() const = 0;

  // The mirror of this cache and its id there (null and 0 when none).
  void set_mirror(std::shared_ptr<Mirror> m, std::uint64_t id) {
    unmirror();
    mirror_ = std::move(m);
    mirror_id_ = id;
  }
  std::uint64_t mirror_id() const { return mirror_ ? mirror_id_ : 0; }

  // Tokens consumed so far: also the text position of the next token.
  std::int64_t size() const { return size_; }

  // The visibility rule: a token at text position t attends to the sinks
  // {0..sinks-1} and the window {t-window+1..t}. Dense: 0 sinks, unbounded window.
  virtual std::int64_t sinks() const = 0;
  virtual std::int64_t window() const = 0;

  // How far the query's cache position lags its text position: positions are
  // text positions while the stream fits (t < sinks + window), cache
  // positions after that.
  std::int64_t position_shift(std::int64_t t) const { return std::max<std::int64_t>(0, t - (sinks() + window() - 1)); }

  // Whether n more tokens can be appended; check_room throws CacheFullError
  // with the reason when they cannot.
  virtual bool has_room(std::int64_t n) const = 0;
  virtual void check_room(std::int64_t n) const = 0;

  // Segments of cached tokens visible to a query at text position t >= size().
  virtual int segments(int layer, std::int64_t t, KVSegment* out) const = 0;

  // Stores keys and values of the n tokens at text positions pos..pos+n-1
  // (row i at k + i * ld). Called once per layer, after that layer's attention.
  virtual void store(int layer, std::int64_t pos, std::int64_t n, const float* k, const float* v, std::size_t ld) = 0;

  // Marks n more tokens as consumed, after all layers stored them.
  void advance(std::int64_t n) { size_ += n; }

  // Forgets every token (memory is kept).
  void clear() { size_ = 0; }

  // Whether the cache can be cut back to its first n tokens: a dense cache
  // always (n <= size), a ring only while it has not wrapped (nothing of the
  // first n has been overwritten and nothing past them is needed again).
  virtual bool can_truncate(std::int64_t n) const = 0;
  void truncate(std::int64_t n) {
    if (n < 0 || n > size_ || !can_truncate(n))
      throw InputError(describe() + ": cannot be cut back from " + std::to_string(size_) + " to " + std::to_string(n) +
                       " tokens" + (n <= size_ && n >= 0 ? " (its ring has wrapped: the tokens before are gone)" : ""));
    size_ = n;
  }

  // Room for `capacity` positions with what is cached where it is: true
  // when the cache has it or has grown to it in place, false when only a
  // copy (copy_prefix) can give it. A ring's room is its rule.
  virtual bool grow(std::int64_t capacity) { return capacity <= this->capacity(); }

  // An empty cache of the same kind and rule; a dense one with room for at
  // least `capacity` positions (and never less than this one has).
  virtual std::unique_ptr<KVCacheBase> empty_like(std::int64_t capacity = 0) const = 0;

  // A new cache holding this one's first n tokens (truncation's rule), with
  // room for `capacity` positions if dense: how a conversation or a shared
  // prefix is reused without prefilling it again.
  std::unique_ptr<KVCacheBase> copy_prefix(std::int64_t n, std::int64_t capacity = 0) const {
    if (n < 0 || n > size_ || !can_truncate(n))
      throw InputError(describe() + ": its first " + std::to_string(n) + " of " + std::to_string(size_) +
                       " tokens cannot be copied (a wrapped ring holds only its whole history)");
    auto out = empty_like(std::max(capacity, n));
    const auto from = state(n);
    const auto to = out->state(n);
    for (std::size_t i = 0; i < from.size(); ++i) std::memcpy(to[i].data(), from[i].data(), from[i].size_bytes());
    out->size_ = n;
    if (mirror_) mirror_->copied(mirror_id_, *out, n);
    return out;
  }

  // The buffers that hold the keys and values of a cache of n tokens, in an
  // order fixed by the kind and the sizes: what copies and cache files move.
  virtual std::vector<std::span<float>> state(std::int64_t n) = 0;
  std::vector<std::span<const float>> state(std::int64_t n) const {
    const auto s = const_cast<KVCacheBase*>(this)->state(n);
    return {s.begin(), s.end()};
  }
  // Sets the number of tokens after state(n) was filled from elsewhere (a
  // cache file): contents a mirror never saw, so the mirror is let go.
  void restore_size(std::int64_t n) {
    unmirror();
    size_ = n;
  }

  // Whether two caches see the same tokens of a stream (the same rule).
  bool same_rule(const KVCacheBase& other) const { return sinks() == other.sinks() && window() == other.window(); }

  // Token positions this cache holds at most, and the bytes of its buffers.
  virtual std::int64_t capacity() const = 0;
  std::int64_t occupancy() const { return std::min(size_, capacity()); }
  virtual std::size_t bytes() const = 0;
  virtual std::string describe() const = 0;

 protected:
  std::int64_t size_ = 0;

 private:
  void unmirror() noexcept {
    if (mirror_) mirror_->dropped(mirror_id_);
    mirror_.reset();
  }

  std::shared_ptr<Mirror> mirror_;
  std::uint64_t mirror_id_ = 0;
};

// The dense cache: every token of the sequence, up to MaxSeq positions (the
// context the model was trained with). A larger capacity may be asked for, to
// measure what happens past that length (RoPE extrapolation).
//
// Its memory: address space for MaxSeq positions (or the capacity, if
// larger) is reserved at once, and `capacity` of them are usable; grow()
// opens more in place, so a conversation's cache grows with it and is never
// copied. The system backs only the pages written: a cache costs the memory
// of the tokens it holds, whatever its capacity.
template <class Config>
class KVCache final : public KVCacheBase<Config> {
 public:
  explicit KVCache(std::int64_t capacity = Config::MaxSeq)
      : capacity_(checked_capacity(capacity)),
        reserved_(std::max<std::int64_t>(capacity, Config::MaxSeq)),
        layer_floats_(page_floats(static_cast<std::size_t>(reserved_) * Config::KVDim)),
        memory_(2 * Config::Layers * layer_floats_ * sizeof(float), huge_pages(layer_floats_)) {
    commit(capacity_);
  }
  // A copy: its own memory, the same capacity, the cached tokens.
  KVCache(const KVCache& other) : KVCache(other.capacity_) {
    KVCacheBase<Config>::operator=(other);
    const auto from = static_cast<const KVCacheBase<Config>&>(other).state(other.size_);
    const auto to = state(other.size_);
    for (std::size_t i = 0; i < from.size(); ++i) std::memcpy(to[i].data(), from[i].data(), from[i].size_bytes());
  }
  KVCache& operator=(const KVCache&) = delete;

  typename KVCacheBase<Config>::Kind kind() const override { return KVCacheBase<Config>::Kind::Dense; }
  std::int64_t sinks() const override { return 0; }
  std::int64_t window() const override { return kUnboundedWindow; }
  std::int64_t capacity() const override { return capacity_; }
  bool grow(std::int64_t capacity) override {
    if (capacity <= capacity_) return true;
    if (capacity > reserved_) return false;
    commit(capacity);
    capacity_ = capacity;
    return true;
  }
  bool can_truncate(std::int64_t n) const override { return n <= this->size_; }
  std::unique_ptr<KVCacheBase<Config>> empty_like(std::int64_t capacity) const override {
    return std::make_unique<KVCache>(std::max(capacity, capacity_));
  }
  std::vector<std::span<float>> state(std::int64_t n) override {
    std::vector<std::span<float>> out;
    const auto used = static_cast<std::size_t>(n) * Config::KVDim;
    for (int l = 0; l < Config::Layers; ++l) out.emplace_back(keys(l), used), out.emplace_back(values(l), used);
    return out;
  }
  // What the capacity may take: the memory budget of a pool counts this.
  std::size_t bytes() const override {
    return 2 * Config::Layers * static_cast<std::size_t>(capacity_) * Config::KVDim * sizeof(float);
  }
  std::string describe() const override { return "dense KV cache of " + std::to_string(capacity_) + " positions"; }

  bool has_room(std::int64_t n) const override { return this->size_ + n <= capacity_; }
  void check_room(std::int64_t n) const override {
    if (!has_room(n))
      throw CacheFullError("dense KV cache is full: " + std::to_string(this->size_) + " tokens cached + " + std::to_string(n) +
                           " new > " + (capacity_ == Config::MaxSeq ? "MaxSeq " : "capacity ") + std::to_string(capacity_) +
                           "; a sink+window cache (SinkWindowKVCache) never runs out");
  }

  int segments(int layer, std::int64_t, KVSegment* out) const override {
    if (this->size_ == 0) return 0;
    out[0] = {keys(layer), values(layer), Config::KVDim, this->size_, false, 0};
    return 1;
  }

  void store(int layer, std::int64_t pos, std::int64_t n, const float* k, const float* v, std::size_t ld) override {
    float* const kl = keys(layer) + static_cast<std::size_t>(pos) * Config::KVDim;
    float* const vl = values(layer) + static_cast<std::size_t>(pos) * Config::KVDim;
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      std::memcpy(kl + i * Config::KVDim, k + i * ld, Config::KVDim * sizeof(float));
      std::memcpy(vl + i * Config::KVDim, v + i * ld, Config::KVDim * sizeof(float));
    }
  }

 private:
  static std::int64_t checked_capacity(std::int64_t capacity) {
    if (capacity <= 0) throw InputError("dense KV cache: capacity " + std::to_string(capacity) + " must be positive");
    return capacity;
  }
  // A layer's keys (or values) start on a page, so that each opens on its own.
  static std::size_t page_floats(std::size_t floats) {
    const std::size_t page = ReservedMemory::page() / sizeof(float);
    return (floats + page - 1) / page * page;
  }
  // 2 MB pages where a layer's reserve is at least 16 of them (a page then
  // holds at most 1/16 of the positions; Llama 2 7B's 4096 x 4096 floats:
  // 128 positions), so that a short conversation is not backed by the
  // pages of a long one. Below that 4 KB pages, whose TLB misses attention
  // over a few MB per layer hardly feels.
  static bool huge_pages(std::size_t layer_floats) { return layer_floats * sizeof(float) >= 16 * (std::size_t(2) << 20); }

  float* keys(int layer) const {
    return reinterpret_cast<float*>(memory_.data()) + static_cast<std::size_t>(layer) * layer_floats_;
  }
  float* values(int layer) const { return keys(Config::Layers + layer); }
  // Positions [0, capacity) of every layer's keys and values usable.
  void commit(std::int64_t capacity) {
    const std::size_t bytes = static_cast<std::size_t>(capacity) * Config::KVDim * sizeof(float);
    for (int r = 0; r < 2 * Config::Layers; ++r)
      memory_.commit(static_cast<std::size_t>(r) * layer_floats_ * sizeof(float), bytes);
  }

  std::int64_t capacity_, reserved_;
  std::size_t layer_floats_;
  ReservedMemory memory_;  // [keys, values][layer][position][kv_dim], layer_floats_ per layer
};

}  // namespace streamllm
