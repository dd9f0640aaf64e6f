// KV caches in 16, 8 and 4 bits (quant/kv_types.hpp): against the goldens,
// against the f32 cache over a long stream (KL divergence), and through
// everything that holds a cache: copies, files, the pool, a batch.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common.hpp"

using namespace streamllm;
using test::model;
using test::Stories;

namespace {

std::unique_ptr<KVCacheBase<Stories>> make_cache(const test::Golden& g, KVTypes types) {
  if (g.mode == "dense") return std::make_unique<DynamicKVCache<Stories>>(Stories::MaxSeq, types);
  return std::make_unique<DynamicSinkWindowKVCache<Stories>>(g.sinks, g.window, types);
}

// The stated bounds, from measurement on stories260K (docs/performance.md,
// "KV cache types", has the figures): the largest |logit error| against the
// float64 goldens (16-bit types; f32 as the goldens' own 1e-3), and the mean
// KL divergence from the f32 cache's next-token distribution over a long
// stream. stories260K's heads are 8 wide, so one block of 32 holds four
// heads' keys under one scale: 4-bit keys lose far more there than in the
// 64- and 128-wide heads of real models (the same section).
struct LogitBound {
  KVTypes types;
  float logit;
};
constexpr LogitBound kLogitBounds[] = {
    {{KVType::F32, KVType::F32}, 1e-3f}, {{KVType::F16, KVType::F16}, 0.03f}, {{KVType::BF16, KVType::BF16}, 0.3f}};
struct KldBound {
  KVTypes types;
  double kld;
};
constexpr KldBound kKldBounds[] = {
    {{KVType::F32, KVType::F32}, 1e-12},  {{KVType::F16, KVType::F16}, 5e-6},   {{KVType::BF16, KVType::BF16}, 3e-4},
    {{KVType::F16, KVType::Q8_0}, 2.5e-5}, {{KVType::Q8_0, KVType::Q8_0}, 2e-3}, {{KVType::Q8_0, KVType::Q4_0}, 7e-3},
    {{KVType::Q4_0, KVType::Q4_0}, 1.0},
};

std::vector<double> log_softmax(std::span<const float> x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - lse;
  return out;
}

// Every position's log-probabilities of a text teacher-forced through a cache.
std::vector<std::vector<double>> stream_logprobs(KVCacheBase<Stories>& cache, std::span<const TokenId> ids, std::size_t chunk) {
  std::vector<std::vector<double>> out;
  for (std::size_t p0 = 0; p0 < ids.size(); p0 += chunk) {
    const std::size_t n = std::min(chunk, ids.size() - p0);
    const Llama<Stories>::Sequence seq{&cache, ids.subspan(p0, n), true};
    const auto logits = model().forward({&seq, 1});
    for (std::size_t i = 0; i < n; ++i) out.push_back(log_softmax(logits.row(0, i)));
  }
  return out;
}

double mean_kld(const std::vector<std::vector<double>>& p, const std::vector<std::vector<double>>& q) {
  double sum = 0;
  for (std::size_t t = 0; t < p.size(); ++t)
    for (std::size_t i = 0; i < p[t].size(); ++i) sum += std::exp(p[t][i]) * (p[t][i] - q[t][i]);
  return sum / static_cast<double>(p.size());
}

std::vector<TokenId> long_text_ids(std::size_t n) {
  std::ifstream in(test::data_dir() / "texts" / "tinystories-valid-excerpt.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  auto ids = test::tok().encode(ss.str(), true);
  REQUIRE(ids.size() >= n);
  ids.resize(n);
  return ids;
}

}  // namespace

TEST_CASE("16-bit caches reproduce the goldens within their bounds, greedy ids where the margin exceeds them",
          "[kv_types][golden]") {
  for (const LogitBound& b : kLogitBounds)
    for (const std::string mode : {"dense", "sink_window"})
      for (const auto& g : test::goldens(mode)) {
        auto cache = make_cache(g, b.types);
        float worst = 0;
        int checked_ids = 0;
        for (int p = 0; p < g.steps; ++p) {
          const auto logits = model().decode(g.ids[static_cast<std::size_t>(p)], *cache);
          INFO(g.name << " " << kv_types_name(b.types) << " position " << p);
          if (auto it = g.logits.find(p); it != g.logits.end()) worst = std::max(worst, test::max_abs_diff(logits, it->second));
          const auto step = static_cast<std::size_t>(p + 1) - g.prompt_ids.size();  // generated step, if past the prompt
          if (static_cast<std::size_t>(p + 1) >= g.prompt_ids.size() && step < g.margins.size() &&
              g.margins[step] > 2 * b.logit) {
            REQUIRE(argmax(logits) == g.ids[static_cast<std::size_t>(p + 1)]);
            ++checked_ids;
          }
        }
        std::cout << "golden " << g.name << " cache " << kv_types_name(b.types) << ": max |logit error| " << worst << ", "
                  << checked_ids << " greedy ids checked\n";
        REQUIRE(worst <= b.logit);
      }
}

TEST_CASE("quantised caches over a long stream: mean KL divergence from the f32 cache within its bound", "[kv_types]") {
  const auto ids = long_text_ids(2048);
  struct Mode {
    const char* name;
    std::function<std::unique_ptr<KVCacheBase<Stories>>(KVTypes)> make;
    std::size_t tokens;
  };
  const Mode modes[] = {
      {"dense", [](KVTypes t) { return std::make_unique<DynamicKVCache<Stories>>(Stories::MaxSeq, t); }, Stories::MaxSeq},
      {"sink+window 4+252", [](KVTypes t) { return std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 252, t); },
       ids.size()},
  };
  for (const Mode& m : modes) {
    const std::span<const TokenId> text(ids.data(), m.tokens);
    const auto reference = stream_logprobs(*m.make({}), text, 64);
    for (const KldBound& b : kKldBounds) {
      const double kld = mean_kld(reference, stream_logprobs(*m.make(b.types), text, 64));
      std::cout << "long stream, " << m.name << ", " << m.tokens << " tokens, cache " << kv_types_name(b.types)
                << ": mean KLD " << kld << "\n";
      INFO(m.name << " " << kv_types_name(b.types));
      REQUIRE(kld <= b.kld);
    }
  }
}

// The new tokens of a call are rounded to the cache's types before they are
// attended to, so a text read in one call and token by token sees the same
// cache. What still differs is the keys' and values' last bits from the
// batched and the one-token matmuls, which a quantiser may round apart: the
// two readings stay far closer to each other than either is to the f32 cache.
TEST_CASE("a quantised cache gives the same logits whether a text is read in one call or token by token", "[kv_types]") {
  const auto ids = long_text_ids(300);
  for (const KVTypes types : {KVTypes{KVType::Q4_0, KVType::Q4_0}, KVTypes{KVType::Q8_0, KVType::F16},
                              KVTypes{KVType::F32, KVType::Q8_0}, KVTypes{KVType::BF16, KVType::BF16}}) {
    for (const bool window : {false, true}) {
      auto make = [&](KVTypes t) -> std::unique_ptr<KVCacheBase<Stories>> {
        if (window) return std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 60, t);
        return std::make_unique<DynamicKVCache<Stories>>(Stories::MaxSeq, t);
      };
      const auto whole = stream_logprobs(*make(types), ids, ids.size());
      const auto single = stream_logprobs(*make(types), ids, 1);
      const auto f32 = stream_logprobs(*make({}), ids, 1);
      const double apart = mean_kld(whole, single), from_f32 = mean_kld(f32, single);
      std::cout << "one call and token by token, " << kv_types_name(types) << (window ? ", sink+window" : ", dense")
                << ": mean KLD between them " << apart << ", from the f32 cache " << from_f32 << "\n";
      INFO(kv_types_name(types) << (window ? " sink+window" : " dense"));
      REQUIRE(apart <= 0.25 * from_f32);
    }
  }
}

TEST_CASE("a cache's bytes are its types' rows, and the pool counts them and holds more conversations in fewer bits",
          "[kv_types]") {
  constexpr std::size_t rows = Stories::Layers * 256;  // per K or V
  REQUIRE(KVCache<Stories>(256).bytes() == 2 * rows * Stories::KVDim * 4);
  REQUIRE(KVCache<Stories, KVType::F16>(256).bytes() == 2 * rows * Stories::KVDim * 2);
  REQUIRE(KVCache<Stories, KVType::Q8_0>(256).bytes() == 2 * rows * 34);  // KVDim 32: one block a row
  REQUIRE(KVCache<Stories, KVType::Q4_0>(256).bytes() == 2 * rows * 18);
  REQUIRE((KVCache<Stories, KVType::Q8_0, KVType::Q4_0>(256).bytes()) == rows * (34 + 18));
  REQUIRE((SinkWindowKVCache<Stories, 4, 60, KVType::BF16>().bytes()) == 2 * Stories::Layers * 64 * Stories::KVDim * 2);
  REQUIRE(DynamicKVCache<Stories>(256, {KVType::Q8_0, KVType::Q8_0}).position_bytes() == 2 * Stories::Layers * 34);

  // A pool of 1 MiB: conversations of 256 positions, each as many as fit.
  const auto ids = long_text_ids(200);
  for (const KVType t : kKVTypes) {
    CachePoolOptions options;
    options.max_bytes = std::size_t(1) << 20;
    CachePool<Stories> pool(options);
    std::size_t kept = 0;
    for (int c = 0; c < 64; ++c) {
      auto cache = CacheShape{0, 0, 256, {t, t}}.make<Stories>();
      std::vector<TokenId> conv(ids.begin(), ids.begin() + 10);
      conv.push_back(static_cast<TokenId>(c + 3));  // each its own
      model().prefill(conv, *cache);
      pool.put(std::move(cache), conv);
      kept = pool.entries();
    }
    const std::size_t held = pool.bytes();
    std::cout << "pool of 1 MiB, " << kv_type_name(t) << " caches of 256 positions: " << kept << " kept, " << held
              << " bytes\n";
    REQUIRE(held == kept * CacheShape{0, 0, 256, {t, t}}.make<Stories>()->bytes());
    REQUIRE(held <= (std::size_t(1) << 20));
    if (t == KVType::Q4_0) REQUIRE(kept >= 7 * (std::size_t(1) << 20) / KVCache<Stories>(256).bytes());
  }
}

TEST_CASE("save, load and prefix reuse for every type, and a file of another type refused", "[kv_types]") {
  const auto ids = long_text_ids(120);
  const auto dir = std::filesystem::temp_directory_path() / "streamllm_kv_types";
  std::filesystem::create_directories(dir);
  for (const KVType t : kKVTypes)
    for (const bool window : {false, true}) {
      const KVTypes types{t, t == KVType::Q4_0 ? KVType::Q8_0 : t};
      std::unique_ptr<KVCacheBase<Stories>> cache;
      if (window)
        cache = std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 200, types);
      else
        cache = std::make_unique<DynamicKVCache<Stories>>(256, types);
      const std::span<const TokenId> head(ids.data(), 100);
      model().prefill(head, *cache);
      const auto path = (dir / (std::string(kv_type_name(t)) + (window ? "-w" : "-d") + ".slkv")).string();
      save_cache(path, *cache, head, model().fingerprint());
      auto loaded = load_cache<Stories>(path, model().fingerprint(), 0, types);
      REQUIRE(loaded.cache->types() == types);
      REQUIRE(loaded.cache->same_rule(*cache));
      auto prefix = cache->copy_prefix(60, 256);
      REQUIRE(prefix->types() == types);
      // The continuation after each: the loaded cache's to the bit, the
      // prefix's (its last 40 tokens read again) close.
      const TokenId next[] = {ids[100], ids[101]};
      const auto last = [&](KVCacheBase<Stories>& c) {
        const auto out = model().prefill(next, c);
        return std::vector<float>(out.begin(), out.end());
      };
      const auto want = last(*cache);
      REQUIRE(test::max_abs_diff(last(*loaded.cache), want) == 0.0f);
      model().prefill(std::span<const TokenId>(ids.data() + 60, 40), *prefix);
      // (A compact type may round the re-read tokens' keys, whose last bits
      // come from a matmul of 40 rows instead of 100, a level apart.)
      REQUIRE(test::max_abs_diff(last(*prefix), want) < (t == KVType::F32 ? 1e-3f : 0.25f));
      INFO(kv_types_name(types) << (window ? " sink+window" : " dense"));
      const KVTypes other = t == KVType::F32 ? KVTypes{KVType::F16, KVType::F16} : KVTypes{};
      REQUIRE_THROWS_WITH(load_cache<Stories>(path, model().fingerprint(), 0, other),
                          Catch::Contains("holds " + kv_types_name(types)) && Catch::Contains("this run stores"));
      std::filesystem::remove(path);
    }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a quantised cache on a width that is not whole blocks, and an unknown type name, are refused", "[kv_types][bad_input]") {
  using Narrow = LlamaConfig<48, 64, 1, 6, 3, 64, 32>;  // KV width 24
  REQUIRE_THROWS_WITH((DynamicKVCache<Narrow>(16, {KVType::Q8_0, KVType::F32})),
                      Catch::Contains("whole blocks of 32") && Catch::Contains("24 wide"));
  REQUIRE_THROWS_WITH((DynamicSinkWindowKVCache<Narrow>(2, 8, {KVType::F16, KVType::Q4_0})), Catch::Contains("q4_0"));
  REQUIRE_NOTHROW(DynamicKVCache<Narrow>(16, {KVType::F16, KVType::BF16}));
  REQUIRE_THROWS_WITH(parse_kv_type("q5_1", "--cache-type-k"), Catch::Contains("--cache-type-k 'q5_1'") &&
                                                                  Catch::Contains("f32, f16, bf16, q8_0, q4_0"));
}

TEST_CASE("a pool's folder: a file of other types is ignored with a warning, one of its own is found", "[kv_types]") {
  const auto dir = std::filesystem::temp_directory_path() / "streamllm_kv_types_pool";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto ids = long_text_ids(40);
  for (const KVType t : {KVType::F32, KVType::Q8_0}) {
    auto cache = std::make_unique<DynamicKVCache<Stories>>(64, KVTypes{t, t});
    model().prefill(ids, *cache);
    save_cache((dir / (std::string(kv_type_name(t)) + ".slkv")).string(), *cache, ids, model().fingerprint());
  }
  std::vector<std::string> warnings;
  CachePoolOptions options;
  options.max_bytes = std::size_t(64) << 20;
  options.dir = dir.string();
  options.fingerprint = model().fingerprint();
  options.types = KVTypes{KVType::Q8_0, KVType::Q8_0};
  options.warn = [&](const std::string& w) { warnings.push_back(w); };
  CachePool<Stories> pool(options);
  REQUIRE(warnings.size() == 1);
  REQUIRE_THAT(warnings[0], Catch::Contains("f32.slkv") && Catch::Contains("holds K f32, V f32, this server stores K q8_0, V q8_0"));
  auto taken = pool.take(ids, CacheShape{0, 0, 64, {KVType::Q8_0, KVType::Q8_0}});
  REQUIRE(taken.tokens == ids.size() - 1);  // the last prompt token is always read, for its logits
  REQUIRE(taken.cache->types() == KVTypes{KVType::Q8_0, KVType::Q8_0});
  std::filesystem::remove_all(dir);
}
