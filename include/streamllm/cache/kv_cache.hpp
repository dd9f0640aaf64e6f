// KV caches: what a query may attend to. The model asks a cache for the
// segments of cached keys and values that a query at text position t sees,
// and hands it the new tokens' keys and values after each layer. The model
// never owns a cache: one model serves any number of them.
//
// Keys and values are stored in the cache's types (quant/kv_types.hpp: f32,
// the default the goldens check, f16, bf16, q8_0, q4_0; keys and values
// apart): a cache's bytes, its files and every copy of it are in those types.
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

  explicit KVCacheBase(KVTypes types = {}) : types_(types) {}
  // A copy is a cache of its own, which no other process mirrors yet.
  KVCacheBase(const KVCacheBase& other) : size_(other.size_), types_(other.types_) {}
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

  // The types its keys and values are stored in.
  KVTypes types() const { return types_; }

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
  // (row i at k + i * ld, floats: converted to the cache's types). Called
  // once per layer, after that layer's attention.
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
    for (std::size_t i = 0; i < from.size(); ++i) std::memcpy(to[i].data(), from[i].data(), from[i].size());
    out->size_ = n;
    if (mirror_) mirror_->copied(mirror_id_, *out, n);
    return out;
  }

  // The bytes that hold the keys and values of a cache of n tokens, in an
  // order fixed by the kind, the sizes and the types: what copies and cache
  // files move.
  virtual std::vector<std::span<std::byte>> state(std::int64_t n) = 0;
  std::vector<std::span<const std::byte>> state(std::int64_t n) const {
    const auto s = const_cast<KVCacheBase*>(this)->state(n);
    return {s.begin(), s.end()};
  }
  // Sets the number of tokens after state(n) was filled from elsewhere (a
  // cache file): contents a mirror never saw, so the mirror is let go.
  void restore_size(std::int64_t n) {
    unmirror();
    size_ = n;
  }

  // Whether two caches see the same tokens of a stream (the same rule) in
  // the same types: whether one's contents may stand for the other's.
  bool same_rule(const KVCacheBase& other) const {
    return sinks() == other.sinks() && window() == other.window() && types_ == other.types_;
  }

  // Bytes of one position's keys and values over every layer.
  std::size_t position_bytes() const {
    return Config::Layers * (kv_row_bytes(types_.k, Config::KVDim) + kv_row_bytes(types_.v, Config::KVDim));
  }

  // Token positions this cache holds at most, and the bytes of its buffers.
  virtual std::int64_t capacity() const = 0;
  std::int64_t occupancy() const { return std::min(size_, capacity()); }
  virtual std::size_t bytes() const = 0;
  virtual std::string describe() const = 0;

 protected:
  // The types' rows must be whole blocks of the model's KV width.
  void check_types() const {
    kv_check_row(types_.k, Config::KVDim, describe());
    kv_check_row(types_.v, Config::KVDim, describe());
  }
  // Row i of n (at k + i * ld) into the cache's rows at kd and vd.
  void encode(const float* k, const float* v, std::size_t ld, std::size_t i, std::byte* kd, std::byte* vd) const {
    kv_encode_row(types_.k, k + i * ld, Config::KVDim, kd);
    kv_encode_row(types_.v, v + i * ld, Config::KVDim, vd);
  }
  std::size_t k_row() const { return kv_row_bytes(types_.k, Config::KVDim); }
  std::size_t v_row() const { return kv_row_bytes(types_.v, Config::KVDim); }

  std::int64_t size_ = 0;

 private:
  void unmirror() noexcept {
    if (mirror_) mirror_->dropped(mirror_id_);
    mirror_.reset();
  }

  std::shared_ptr<Mirror> mirror_;
  std::uint64_t mirror_id_ = 0;
  KVTypes types_;
};

// The dense cache: every token of the sequence, up to MaxSeq positions (the
// context the model was trained with). A larger capacity may be asked for, to
// measure what happens past that length (RoPE extrapolation). Its types are
// chosen at run time here (the front ends' --cache-type-k/-v), in the type
// with KVCache<Config, K, V>.
//
// Its memory: address space for MaxSeq positions (or the capacity, if
// larger) is reserved at once, and `capacity` of them are usable; grow()
// opens more in place, so a conversation's cache grows with it and is never
// copied. The system backs only the pages written: a cache costs the memory
// of the tokens it holds, whatever its capacity.
template <class Config>
class DynamicKVCache : public KVCacheBase<Config> {
  using Base = KVCacheBase<Config>;

 public:
  explicit DynamicKVCache(std::int64_t capacity = Config::MaxSeq, KVTypes types = {})
      : Base(types),
        capacity_(checked_capacity(capacity)),
        reserved_(std::max<std::int64_t>(capacity, Config::MaxSeq)),
        k_layer_(page_bytes(static_cast<std::size_t>(reserved_) * this->k_row())),
        v_layer_(page_bytes(static_cast<std::size_t>(reserved_) * this->v_row())),
        memory_((k_layer_ + v_layer_) * Config::Layers, huge_pages(std::min(k_layer_, v_layer_))) {
    this->check_types();
    commit(capacity_);
  }
  // A copy: its own memory, the same capacity and types, the cached tokens.
  DynamicKVCache(const DynamicKVCache& other) : DynamicKVCache(other.capacity_, other.types()) {
    Base::operator=(other);
    const auto from = static_cast<const Base&>(other).state(other.size_);
    const auto to = state(other.size_);
    for (std::size_t i = 0; i < from.size(); ++i) std::memcpy(to[i].data(), from[i].data(), from[i].size());
  }
  DynamicKVCache& operator=(const DynamicKVCache&) = delete;

  typename Base::Kind kind() const override { return Base::Kind::Dense; }
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
  std::unique_ptr<Base> empty_like(std::int64_t capacity) const override {
    return std::make_unique<DynamicKVCache>(std::max(capacity, capacity_), this->types());
  }
  std::vector<std::span<std::byte>> state(std::int64_t n) override {
    std::vector<std::span<std::byte>> out;
    const auto pos = static_cast<std::size_t>(n);
    for (int l = 0; l < Config::Layers; ++l) out.emplace_back(keys(l), pos * this->k_row()), out.emplace_back(values(l), pos * this->v_row());
    return out;
  }
  // What the capacity may take: the memory budget of a pool counts this.
  std::size_t bytes() const override { return static_cast<std::size_t>(capacity_) * this->position_bytes(); }
  std::string describe() const override {
    return "dense KV cache of " + std::to_string(capacity_) + " positions" +
           (this->types() == KVTypes{} ? "" : " (" + kv_types_name(this->types()) + ")");
  }

  bool has_room(std::int64_t n) const override { return this->size_ + n <= capacity_; }
  void check_room(std::int64_t n) const override {
    if (!has_room(n))
      throw CacheFullError("dense KV cache is full: " + std::to_string(this->size_) + " tokens cached + " + std::to_string(n) +
                           " new > " + (capacity_ == Config::MaxSeq ? "MaxSeq " : "capacity ") + std::to_string(capacity_) +
                           "; a sink+window cache (SinkWindowKVCache) never runs out");
  }

  int segments(int layer, std::int64_t, KVSegment* out) const override {
    if (this->size_ == 0) return 0;
    out[0] = {keys(layer), values(layer), this->k_row(), this->v_row(), this->types(), this->size_, false, 0};
    return 1;
  }

  void store(int layer, std::int64_t pos, std::int64_t n, const float* k, const float* v, std::size_t ld) override {
    const auto p = static_cast<std::size_t>(pos);
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
      this->encode(k, v, ld, i, keys(layer) + (p + i) * this->k_row(), values(layer) + (p + i) * this->v_row());
  }

 private:
  static std::int64_t checked_capacity(std::int64_t capacity) {
    if (capacity <= 0) throw InputError("dense KV cache: capacity " + std::to_string(capacity) + " must be positive");
    return capacity;
  }
  // A layer's keys (or values) start on a page, so that each opens on its own.
  static std::size_t page_bytes(std::size_t bytes) {
    const std::size_t page = ReservedMemory::page();
    return (bytes + page - 1) / page * page;
  }
  // 2 MB pages where a layer's reserve is at least 16 of them (a page then
  // holds at most 1/16 of the positions; Llama 2 7B's 4096 x 4096 floats:
  // 128 positions), so that a short conversation is not backed by the
  // pages of a long one. Below that 4 KB pages, whose TLB misses attention
  // over a few MB per layer hardly feels.
  static bool huge_pages(std::size_t layer_bytes) { return layer_bytes >= 16 * (std::size_t(2) << 20); }

  // [keys of every layer][values of every layer], each layer on its pages.
  std::byte* keys(int layer) const { return memory_.data() + static_cast<std::size_t>(layer) * k_layer_; }
  std::byte* values(int layer) const { return keys(Config::Layers) + static_cast<std::size_t>(layer) * v_layer_; }
  // Positions [0, capacity) of every layer's keys and values usable.
  void commit(std::int64_t capacity) {
    const auto c = static_cast<std::size_t>(capacity);
    for (int l = 0; l < Config::Layers; ++l) {
      memory_.commit(static_cast<std::size_t>(keys(l) - memory_.data()), c * this->k_row());
      memory_.commit(static_cast<std::size_t>(values(l) - memory_.data()), c * this->v_row());
    }
  }

  std::int64_t capacity_, reserved_;
  std::size_t k_layer_, v_layer_;  // bytes reserved per layer
  ReservedMemory memory_;
};

// A dense cache whose types are in its type: KVCache<Config> is f32,
// KVCache<Config, KVType::Q8_0> stores q8_0 keys and values.
template <class Config, KVType K = KVType::F32, KVType V = K>
class KVCache final : public DynamicKVCache<Config> {
 public:
  explicit KVCache(std::int64_t capacity = Config::MaxSeq) : DynamicKVCache<Config>(capacity, KVTypes{K, V}) {}
};

}  // namespace streamllm
