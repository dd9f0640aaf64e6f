// --cache-type-k / --cache-type-v (llama.cpp's names; --ctk / --ctv): the
// types a front end's KV caches store keys and values in.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "streamllm/quant/kv_types.hpp"

namespace examples {

// The chat binary's and the server's default (docs/performance.md, "KV cache
// types", has the measurements it rests on). The library's, generate's and
// perplexity's default is f32, the type the goldens check.
inline constexpr streamllm::KVTypes kChatCacheTypes{streamllm::KVType::Q8_0, streamllm::KVType::Q8_0};

struct CacheTypeOptions {
  std::string k, v;
  const CLI::Option* k_option = nullptr;
  const CLI::Option* v_option = nullptr;

  // The types for a model whose keys and values (a rank's slice of them) are
  // kv_width wide. A quantised default the width does not take in whole
  // blocks (stories260K split over processes) falls back to f16, said on
  // stderr; a type the user named is never changed (the cache refuses it).
  streamllm::KVTypes types(std::size_t kv_width) const {
    auto pick = [&](const std::string& name, const CLI::Option* given, const char* what) {
      const streamllm::KVType t = streamllm::parse_kv_type(name, what);
      if (kv_width % streamllm::kv_block(t) == 0 || (given && given->count() > 0)) return t;
      std::fprintf(stderr, "%s: keys and values %zu wide are not whole blocks of %s: f16 instead\n", what, kv_width,
                   name.c_str());
      return streamllm::KVType::F16;
    };
    return {pick(k, k_option, "--cache-type-k"), pick(v, v_option, "--cache-type-v")};
  }
};

// The two options, defaulting to `defaults` (the front end's choice).
inline void add_cache_type_options(CLI::App& app, CacheTypeOptions& o, streamllm::KVTypes defaults) {
  o.k = std::string(streamllm::kv_type_name(defaults.k));
  o.v = std::string(streamllm::kv_type_name(defaults.v));
  const auto names = CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"});
  o.k_option = app.add_option("--cache-type-k,--ctk", o.k, "KV cache type of the keys: f32, f16, bf16, q8_0, q4_0")
                   ->capture_default_str()
                   ->check(names);
  o.v_option = app.add_option("--cache-type-v,--ctv", o.v, "KV cache type of the values: f32, f16, bf16, q8_0, q4_0")
                   ->capture_default_str()
                   ->check(names);
}

}  // namespace examples
