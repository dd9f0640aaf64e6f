// Caches kept after their sequences end, with the token ids they hold, so a
// request that starts the same way continues from one instead of prefilling
// it again: a client of a chat API resends the whole conversation every turn.
//
// A request takes the kept cache with the longest common token prefix. A
// dense cache serves any prefix of what it holds (cut back, or copied when
// the rest may serve someone else); a sink+window cache whose ring has
// wrapped serves only its whole history, because the ring cannot roll back:
// an endless StreamingLLM conversation still continues turn after turn.
//
// Memory is bounded (least recently used evicted first). With a folder,
// evicted caches are written there (cache_file.hpp) and found again by the
// same rule, also by the next process on the same model; files that do not
// load are ignored with a warning, never used.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "streamllm/cache/cache_file.hpp"
#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/core/error.hpp"

namespace streamllm {

// The kind of cache a request wants, before there is one.
struct CacheShape {
  std::int64_t sinks = 0;
  std::int64_t window = 0;    // 0: dense
  std::int64_t capacity = 0;  // dense: positions (0: the model's MaxSeq)
  KVTypes types;              // what its keys and values are stored in

  CacheShape() = default;
  CacheShape(std::int64_t sinks_, std::int64_t window_, std::int64_t capacity_ = 0, KVTypes types_ = {})
      : sinks(sinks_), window(window_), capacity(capacity_), types(types_) {}

  bool dense() const { return window == 0; }
  template <class Config>
  std::unique_ptr<KVCacheBase<Config>> make() const {
    if (dense()) return std::make_unique<DynamicKVCache<Config>>(capacity > 0 ? capacity : Config::MaxSeq, types);
    return std::make_unique<DynamicSinkWindowKVCache<Config>>(sinks, window, types);
  }
  template <class Config>
  bool matches(const KVCacheBase<Config>& c) const {
    return c.types() == types &&
           (dense() ? c.kind() == KVCacheBase<Config>::Kind::Dense : c.sinks() == sinks && c.window() == window);
  }
  bool matches(const CacheFileInfo& f) const {
    return f.types == types && (dense() ? !f.sink_window : f.sink_window && f.sinks == sinks && f.window == window);
  }
};

inline std::size_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

struct CachePoolOptions {
  std::size_t max_bytes = 0;  // memory for kept caches; 0 keeps none in memory
  std::string dir;            // where evicted caches go ("" : nowhere)
  std::uintmax_t max_dir_bytes = std::uintmax_t(4) << 30;
  std::uint64_t fingerprint = 0;                              // the model's (Llama::fingerprint)
  std::optional<KVTypes> types;                               // the types it keeps: files of others are ignored
  std::function<void(const std::string&)> warn;               // files ignored, writes that failed
  std::function<void(const std::string& note)> on_disk_note;  // each usable file's note, at start
};

template <class Config>
class CachePool {
 public:
  using Cache = KVCacheBase<Config>;

  using Options = CachePoolOptions;

  // What a request starts from: `tokens` of its prompt already in `cache`.
  struct Taken {
    std::unique_ptr<Cache> cache;
    std::size_t tokens = 0;
  };

  explicit CachePool(Options opt) : opt_(std::move(opt)) {
    if (!opt_.dir.empty()) scan_dir();
  }
  CachePool(const CachePool&) = delete;
  CachePool& operator=(const CachePool&) = delete;

  bool enabled() const { return opt_.max_bytes > 0 || !opt_.dir.empty(); }

  // How many prompt tokens take() would find (nothing is moved).
  std::size_t match(std::span<const TokenId> prompt, const CacheShape& shape) const { return best(prompt, shape).tokens; }

  // The cache to continue `prompt` from: a kept one holding its longest
  // prefix (at most all but its last token: the model must compute that
  // token's logits), or none. A dense cache has room for `shape.capacity`.
  Taken take(std::span<const TokenId> prompt, const CacheShape& shape) {
    Best b = best(prompt, shape);
    if (b.tokens == 0) return {};
    if (b.disk != disk_.end()) {  // back into memory first
      auto it = load(b.disk, shape);
      if (it == mem_.end()) return take(prompt, shape);  // it did not load: try the next best
      b.mem = it;
    }
    Entry& e = *b.mem;
    e.last_used = ++clock_;
    const std::int64_t n = static_cast<std::int64_t>(b.tokens);
    Taken out;
    out.tokens = b.tokens;
    if (n == e.cache->size() && (!shape.dense() || e.cache->grow(shape.capacity))) {
      out.cache = std::move(e.cache);  // the whole of it: the conversation goes on in it (grown in place)
      erase(b.mem);
    } else if (n == e.cache->size()) {
      out.cache = e.cache->copy_prefix(n, shape.capacity);  // room for the request
      erase(b.mem);
    } else {
      out.cache = e.cache->copy_prefix(n, shape.capacity);  // the rest may serve another request
    }
    ++hits_;
    evict_to(opt_.max_bytes);  // a file loaded back may have gone past the budget
    return out;
  }

  // Keeps a cache holding exactly `ids`, with the caller's note (saved with
  // it). Kept caches that are a prefix of it go: it serves whatever they did.
  void put(std::unique_ptr<Cache> cache, std::vector<TokenId> ids, std::string note = {}) {
    if (!cache || !enabled() || ids.empty() || static_cast<std::int64_t>(ids.size()) != cache->size()) return;
    for (auto it = mem_.begin(); it != mem_.end();) {
      const bool covered = it->ids.size() <= ids.size() && it->cache->same_rule(*cache) &&
                           common_prefix(it->ids, ids) == it->ids.size() &&
                           cache->can_truncate(static_cast<std::int64_t>(it->ids.size()));
      it = covered ? erase(it) : std::next(it);
    }
    for (auto it = disk_.begin(); it != disk_.end();) {
      const bool covered =
          it->ids.size() <= ids.size() && CacheShape{it->sinks, it->sink_window ? it->window : 0, 0, it->types}.matches(*cache) &&
          common_prefix(it->ids, ids) == it->ids.size() && cache->can_truncate(static_cast<std::int64_t>(it->ids.size()));
      it = covered ? remove_file(it) : std::next(it);
    }
    insert(std::move(cache), std::move(ids), std::move(note));
    evict_to(opt_.max_bytes);
  }

  // Writes every kept cache to the folder (at shutdown), so the next process
  // finds them; without a folder it only forgets them.
  void flush() { evict_to(0); }

  std::size_t bytes() const { return bytes_; }
  std::size_t entries() const { return mem_.size(); }
  std::size_t disk_entries() const { return disk_.size(); }
  std::uint64_t hits() const { return hits_; }

 private:
  struct Entry {
    std::unique_ptr<Cache> cache;
    std::vector<TokenId> ids;
    std::string note;
    std::uint64_t last_used = 0;
    std::size_t bytes = 0;
  };
  using MemIt = typename std::list<Entry>::iterator;
  using DiskIt = std::list<CacheFileInfo>::iterator;

  struct Best {
    MemIt mem;
    DiskIt disk;
    std::size_t tokens = 0;
  };

  // Tokens of `prompt` an entry holding `ids` serves.
  static std::size_t usable(std::span<const TokenId> prompt, std::span<const TokenId> ids, bool whole_only) {
    if (prompt.size() < 2) return 0;
    const std::size_t n = std::min(common_prefix(prompt, ids), prompt.size() - 1);
    return whole_only && n != ids.size() ? 0 : n;
  }

  Best best(std::span<const TokenId> prompt, const CacheShape& shape) const {
    auto& self = const_cast<CachePool&>(*this);
    Best b{self.mem_.end(), self.disk_.end(), 0};
    for (auto it = self.mem_.begin(); it != self.mem_.end(); ++it) {
      if (!shape.matches(*it->cache)) continue;
      std::size_t n = usable(prompt, it->ids, false);
      if (n > 0 && !it->cache->can_truncate(static_cast<std::int64_t>(n))) n = 0;
      if (n > b.tokens || (n == b.tokens && n > 0 && it->last_used > b.mem->last_used)) b = {it, self.disk_.end(), n};
    }
    for (auto it = self.disk_.begin(); it != self.disk_.end(); ++it) {
      if (!shape.matches(*it)) continue;
      // A wrapped ring (more tokens than it holds) serves its whole history only.
      const bool wrapped = it->sink_window && static_cast<std::int64_t>(it->ids.size()) > it->capacity;
      const std::size_t n = usable(prompt, it->ids, wrapped);
      if (n > b.tokens) b = {self.mem_.end(), it, n};
    }
    return b;
  }

  MemIt erase(MemIt it) {
    bytes_ -= it->bytes;
    return mem_.erase(it);
  }

  void insert(std::unique_ptr<Cache> cache, std::vector<TokenId> ids, std::string note) {
    const std::size_t b = cache->bytes();
    mem_.push_back({std::move(cache), std::move(ids), std::move(note), ++clock_, b});
    bytes_ += b;
  }

  // Least recently used first: to the folder if there is one, else gone.
  void evict_to(std::size_t limit) {
    while (bytes_ > limit && !mem_.empty()) {
      auto lru =
          std::min_element(mem_.begin(), mem_.end(), [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
      if (!opt_.dir.empty()) write(*lru);
      erase(lru);
    }
  }

  void write(const Entry& e) {
    Hash64 h;
    const KVTypes types = e.cache->types();
    h.update(e.ids.data(), e.ids.size() * sizeof(TokenId)).value(e.cache->sinks()).value(e.cache->window());
    h.value(static_cast<std::uint64_t>(types.k) << 8 | static_cast<std::uint64_t>(types.v));
    const std::string path = (std::filesystem::path(opt_.dir) / (cache_file_detail::hex(h.digest()) + ".slkv")).string();
    try {
      save_cache(path, *e.cache, e.ids, opt_.fingerprint, e.note);
      disk_.remove_if([&](const CacheFileInfo& f) { return f.path == path; });
      CacheFileInfo info;
      info.path = path;
      info.sink_window = e.cache->kind() == Cache::Kind::SinkWindow;
      info.sinks = e.cache->sinks();
      info.window = info.sink_window ? e.cache->window() : 0;
      info.capacity = e.cache->capacity();
      info.types = types;
      info.ids = e.ids;
      info.file_bytes = std::filesystem::file_size(path);
      disk_bytes_ += info.file_bytes;
      disk_.push_back(std::move(info));
    } catch (const std::exception& ex) {
      warn(std::string("cannot keep a cache on disk: ") + ex.what());
    }
    while (disk_bytes_ > opt_.max_dir_bytes && !disk_.empty()) remove_file(disk_.begin());  // oldest first
  }

  // Loads a file back into memory (and removes it: memory has it now).
  MemIt load(DiskIt f, const CacheShape& shape) {
    try {
      LoadedCache<Config> c = load_cache<Config>(f->path, opt_.fingerprint, shape.capacity, shape.types);
      if (c.ids != f->ids) throw FileError(f->path, "KV cache file: changed since it was indexed");
      remove_file(f);
      insert(std::move(c.cache), std::move(c.ids), std::move(c.note));
      return std::prev(mem_.end());
    } catch (const std::exception& ex) {
      warn(std::string("ignoring a kept cache: ") + ex.what());
      remove_file(f);
      return mem_.end();
    }
  }

  DiskIt remove_file(DiskIt f) {
    std::error_code ec;
    std::filesystem::remove(f->path, ec);
    disk_bytes_ -= std::min(disk_bytes_, f->file_bytes);
    return disk_.erase(f);
  }

  void scan_dir() {
    std::error_code ec;
    std::filesystem::create_directories(opt_.dir, ec);
    std::vector<std::filesystem::directory_entry> files;
    for (const auto& e : std::filesystem::directory_iterator(opt_.dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".slkv") files.push_back(e);
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.last_write_time() < b.last_write_time(); });
    for (const auto& e : files) {
      try {
        CacheFileInfo info = peek_cache<Config>(e.path().string(), opt_.fingerprint);
        if (opt_.types && info.types != *opt_.types)
          throw FileError(info.path, "KV cache file: holds " + kv_types_name(info.types) + ", this server stores " +
                                         kv_types_name(*opt_.types) + " (--cache-type-k/-v)");
        if (opt_.on_disk_note && !info.note.empty()) opt_.on_disk_note(info.note);
        disk_bytes_ += info.file_bytes;
        disk_.push_back(std::move(info));
      } catch (const std::exception& ex) {
        warn(std::string("ignoring a kept cache: ") + ex.what());
      }
    }
  }

  void warn(const std::string& m) const {
    if (opt_.warn) opt_.warn(m);
  }

  Options opt_;
  std::list<Entry> mem_;
  std::list<CacheFileInfo> disk_;  // oldest first
  std::size_t bytes_ = 0;
  std::uintmax_t disk_bytes_ = 0;
  std::uint64_t clock_ = 0, hits_ = 0;
};

}  // namespace streamllm
