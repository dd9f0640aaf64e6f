// A KV cache on disk: its keys and values with the token ids they hold, so a
// conversation outlives the process that computed it. A file says which
// model computed it (a fingerprint of the weights), the shape, the cache's
// kind and sizes, and ends with a checksum of every byte before it; loading
// refuses, with a FileError naming the difference, anything that would not
// give the same logits: another model, shape, version, kind, a truncated or
// corrupt file. Its keys and values are in the cache's types, which the file
// records; a caller that stores another type is told so (load_cache).
//
// Layout (little-endian, as this library runs):
//   "SLLMKV\0\0"  u32 version  u32 kind (0 dense, 1 sink+window)
//   u32 key type  u32 value type (KVType: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0)
//   u64 model fingerprint      i64 shape[7]
//   i64 sinks  i64 window  i64 capacity  i64 tokens
//   u64 note bytes, the note (the caller's, e.g. a server's answers)
//   i32 ids[tokens]
//   state(tokens)              (KVCacheBase::state: per layer, K and V rows in their types)
//   u64 checksum (Hash64 of everything before)
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/core/hash.hpp"

namespace streamllm {

inline constexpr std::uint32_t kCacheFileVersion = 2;  // 2: the types
inline constexpr char kCacheFileMagic[8] = {'S', 'L', 'L', 'M', 'K', 'V', 0, 0};

// What a cache file holds, read without its keys and values.
struct CacheFileInfo {
  std::string path;
  bool sink_window = false;
  std::int64_t sinks = 0, window = 0, capacity = 0;
  KVTypes types;
  std::vector<TokenId> ids;  // the tokens the cache holds, in order
  std::string note;
  std::uint64_t file_bytes = 0;
};

template <class Config>
struct LoadedCache {
  std::unique_ptr<KVCacheBase<Config>> cache;
  std::vector<TokenId> ids;
  std::string note;
};

namespace cache_file_detail {

struct Header {
  char magic[8];
  std::uint32_t version, kind;
  std::uint32_t key_type, value_type;
  std::uint64_t fingerprint;
  std::int64_t shape[7];
  std::int64_t sinks, window, capacity, tokens;
  std::uint64_t note_bytes;
};
static_assert(sizeof(Header) == 8 + 4 + 4 + 4 + 4 + 8 + 7 * 8 + 4 * 8 + 8);

inline std::string hex(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Reads a header and the note and ids after it, checking each field against
// the model that asks and each length against the file.
template <class Config>
CacheFileInfo read_head(std::ifstream& in, const std::string& path, std::uint64_t fingerprint, Header& h) {
  const auto fail = [&](const std::string& what) { return FileError(path, "KV cache file: " + what); };
  CacheFileInfo info;
  info.path = path;
  std::error_code ec;
  info.file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw fail("cannot read its size: " + ec.message());
  in.read(reinterpret_cast<char*>(&h), sizeof h);
  if (in.gcount() < static_cast<std::streamsize>(sizeof h.magic) || std::memcmp(h.magic, kCacheFileMagic, sizeof h.magic) != 0)
    throw fail("not a streamllm KV cache file (bad magic)");
  if (!in) throw fail("truncated: shorter than its header");
  if (h.version != kCacheFileVersion)
    throw fail("version " + std::to_string(h.version) + ", this build reads version " + std::to_string(kCacheFileVersion));
  if (h.fingerprint != fingerprint)
    throw fail("written by another model (fingerprint " + hex(h.fingerprint) + ", this model's is " + hex(fingerprint) + ")");
  const ModelShape s{h.shape[0], h.shape[1], h.shape[2], h.shape[3], h.shape[4], h.shape[5], h.shape[6]};
  if (!(s == Config::shape())) throw fail("for the shape " + s.to_string() + ", this model is " + Config::shape().to_string());
  if (h.kind > 1) throw fail("unknown cache kind " + std::to_string(h.kind));
  const auto last_type = static_cast<std::uint32_t>(KVType::Q4_0);
  if (h.key_type > last_type || h.value_type > last_type)
    throw fail("unknown key or value type " + std::to_string(h.key_type) + ", " + std::to_string(h.value_type));
  info.types = {static_cast<KVType>(h.key_type), static_cast<KVType>(h.value_type)};
  info.sink_window = h.kind == 1;
  info.sinks = h.sinks;
  info.window = h.window;
  info.capacity = h.capacity;
  if (h.tokens < 0 || h.capacity <= 0 || h.capacity > (std::int64_t{1} << 40) || (!info.sink_window && h.tokens > h.capacity))
    throw fail("holds " + std::to_string(h.tokens) + " tokens in a capacity of " + std::to_string(h.capacity));
  if (info.sink_window && (h.sinks < 0 || h.window < 1 || h.sinks + h.window != h.capacity || h.capacity > Config::MaxSeq))
    throw fail("sink+window sizes " + std::to_string(h.sinks) + " + " + std::to_string(h.window) + " are invalid");
  // Every length against what the file has left (no size computed from a
  // field can overflow: each is bounded by the file's size first).
  const std::uint64_t left = info.file_bytes - sizeof h;
  if (h.note_bytes > left || static_cast<std::uint64_t>(h.tokens) > left / sizeof(TokenId))
    throw fail("truncated: its note and ids need more than the file's " + std::to_string(info.file_bytes) + " bytes");
  info.note.resize(h.note_bytes);
  info.ids.resize(static_cast<std::size_t>(h.tokens));
  if (!in.read(info.note.data(), static_cast<std::streamsize>(h.note_bytes)) ||
      !in.read(reinterpret_cast<char*>(info.ids.data()), static_cast<std::streamsize>(info.ids.size() * sizeof(TokenId))))
    throw fail("truncated in its note or ids");
  for (std::size_t i = 0; i < info.ids.size(); ++i)
    if (info.ids[i] < 0 || info.ids[i] >= Config::Vocab)
      throw fail("token id " + std::to_string(info.ids[i]) + " at index " + std::to_string(i) + " is out of range");
  return info;
}

}  // namespace cache_file_detail

// Writes `cache` (holding exactly `ids`) to `path`, through a temporary file
// renamed into place, so a reader never sees half a file.
template <class Config>
void save_cache(const std::string& path, const KVCacheBase<Config>& cache, std::span<const TokenId> ids,
                std::uint64_t fingerprint, std::string_view note = {}) {
  using cache_file_detail::Header;
  if (static_cast<std::int64_t>(ids.size()) != cache.size())
    throw InputError("save_cache: " + std::to_string(ids.size()) + " ids for a cache of " + std::to_string(cache.size()) +
                     " tokens");
  Header h{};
  std::memcpy(h.magic, kCacheFileMagic, sizeof h.magic);
  h.version = kCacheFileVersion;
  h.kind = cache.kind() == KVCacheBase<Config>::Kind::SinkWindow ? 1 : 0;
  h.key_type = static_cast<std::uint32_t>(cache.types().k);
  h.value_type = static_cast<std::uint32_t>(cache.types().v);
  h.fingerprint = fingerprint;
  const ModelShape s = Config::shape();
  const std::int64_t shape[7] = {s.dim, s.hidden_dim, s.layers, s.heads, s.kv_heads, s.vocab, s.max_seq};
  std::memcpy(h.shape, shape, sizeof shape);
  h.sinks = cache.sinks();
  h.window = h.kind == 1 ? cache.window() : 0;
  h.capacity = cache.capacity();
  h.tokens = cache.size();
  h.note_bytes = note.size();

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw FileError(tmp, "cannot create a KV cache file");
    Hash64 sum;
    auto put = [&](const void* p, std::size_t n) {
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      sum.update(p, n);
    };
    put(&h, sizeof h);
    put(note.data(), note.size());
    put(ids.data(), ids.size_bytes());
    for (const auto& block : cache.state(cache.size())) put(block.data(), block.size());
    const std::uint64_t digest = sum.digest();
    out.write(reinterpret_cast<const char*>(&digest), sizeof digest);
    out.flush();
    if (!out) throw FileError(tmp, "cannot write a KV cache file (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw FileError(path, "cannot move the KV cache file into place");
  }
}

// The header, ids and note of a cache file, checked against this model;
// the keys and values are not read (and so not checksummed) until load_cache.
template <class Config>
CacheFileInfo peek_cache(const std::string& path, std::uint64_t fingerprint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FileError(path, "KV cache file: cannot open");
  cache_file_detail::Header h{};
  return cache_file_detail::read_head<Config>(in, path, fingerprint, h);
}

// Loads a cache file written by save_cache for this model. A dense cache
// gets room for at least `capacity` positions (its stored capacity if more).
// A caller that stores keys and values in `types` gets a FileError for a
// file of other types; without them the cache has the file's.
template <class Config>
LoadedCache<Config> load_cache(const std::string& path, std::uint64_t fingerprint, std::int64_t capacity = 0,
                               std::optional<KVTypes> types = std::nullopt) {
  const auto fail = [&](const std::string& what) { return FileError(path, "KV cache file: " + what); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail("cannot open");
  cache_file_detail::Header h{};
  CacheFileInfo info = cache_file_detail::read_head<Config>(in, path, fingerprint, h);
  if (types && *types != info.types)
    throw fail("holds " + kv_types_name(info.types) + "; this run stores " + kv_types_name(*types) +
               " (--cache-type-k/-v): a cache is read only in the types it was written in");
  LoadedCache<Config> out;
  try {
    if (info.sink_window)
      out.cache = std::make_unique<DynamicSinkWindowKVCache<Config>>(info.sinks, info.window, info.types);
    else
      out.cache = std::make_unique<DynamicKVCache<Config>>(std::max({capacity, info.capacity, h.tokens}), info.types);
  } catch (const InputError& e) {
    throw fail(e.what());
  }
  const auto blocks = out.cache->state(h.tokens);
  std::uint64_t state_bytes = 0;
  for (const auto& b : blocks) state_bytes += b.size();
  const std::uint64_t want = sizeof h + h.note_bytes + info.ids.size() * sizeof(TokenId) + state_bytes + 8;
  if (info.file_bytes != want)
    throw fail(std::string(info.file_bytes < want ? "truncated" : "too long") + ": " + std::to_string(info.file_bytes) +
               " bytes, its header says " + std::to_string(want));
  Hash64 sum;
  sum.update(&h, sizeof h).update(info.note).update(info.ids.data(), info.ids.size() * sizeof(TokenId));
  for (const auto& b : blocks) {
    if (!in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()))) throw fail("truncated");
    sum.update(b.data(), b.size());
  }
  std::uint64_t digest = 0;
  if (!in.read(reinterpret_cast<char*>(&digest), sizeof digest)) throw fail("truncated before its checksum");
  if (digest != sum.digest()) throw fail("corrupt: the checksum does not match its contents");
  out.cache->restore_size(h.tokens);
  out.ids = std::move(info.ids);
  out.note = std::move(info.note);
  return out;
}

}  // namespace streamllm
