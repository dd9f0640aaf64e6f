// StreamingLLM: the sink+window cache against the float64 reference, chunked
// prefill, RoPE re-rotation, and streams of a million tokens.
#include <sys/resource.h>

#include <iostream>
#include <random>

#include "common.hpp"
#include "streamllm/kernels/ops/rope.hpp"

using namespace streamllm;
using test::kGoldenTolerance;
using test::model;
using test::Stories;

namespace {

// Teacher-forces ids[0..steps) through the cache in chunks of `chunk`
// tokens; checks every recorded logit and every greedy id past the prompt.
float run_chunked(const test::Golden& g, KVCacheBase<Stories>& cache, std::size_t chunk) {
  float worst = 0;
  const auto steps = static_cast<std::size_t>(g.steps);
  for (std::size_t p0 = 0; p0 < steps; p0 += chunk) {
    const std::size_t n = std::min(chunk, steps - p0);
    const Llama<Stories>::Sequence seq{&cache, {g.ids.data() + p0, n}, true};
    const auto out = model().forward({&seq, 1});
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = p0 + i;
      INFO(g.name << " chunk " << chunk << " position " << p);
      if (auto it = g.logits.find(static_cast<int>(p)); it != g.logits.end()) {
        const float err = test::max_abs_diff(out.row(0, i), it->second);
        REQUIRE(err <= kGoldenTolerance);
        worst = std::max(worst, err);
      }
      if (p + 1 >= g.prompt_ids.size()) REQUIRE(argmax(out.row(0, i)) == g.ids[p + 1]);
    }
  }
  REQUIRE(cache.size() == g.steps);
  return worst;
}

}  // namespace

TEST_CASE("sink+window goldens: token-by-token decoding reproduces logits and greedy ids", "[golden][streaming]") {
  for (const auto& g : test::goldens("sink_window")) {
    DynamicSinkWindowKVCache<Stories> cache(g.sinks, g.window);
    const float err = run_chunked(g, cache, 1);
    REQUIRE(cache.occupancy() == std::min<std::int64_t>(g.steps, g.sinks + g.window));
    std::cout << "golden " << g.name << " (decode): max |logit error| " << err << "\n";
  }
}

TEST_CASE("sink+window goldens: chunked prefill of any chunk size gives the same logits", "[golden][streaming]") {
  for (const auto& g : test::goldens("sink_window")) {
    const auto W = static_cast<std::size_t>(g.window);
    for (std::size_t chunk : {std::size_t(2), std::size_t(7), W - 1, W, W + 1, 2 * W + 5, std::size_t(g.steps)}) {
      DynamicSinkWindowKVCache<Stories> cache(g.sinks, g.window);
      const float err = run_chunked(g, cache, chunk);
      std::cout << "golden " << g.name << " (chunks of " << chunk << "): max |logit error| " << err << "\n";
    }
  }
}

TEST_CASE("sink+window goldens: greedy generation after a chunked prompt reproduces the ids", "[golden][streaming]") {
  const Tokenizer tok(test::model_path("tok512.model"));
  for (const auto& g : test::goldens("sink_window")) {
    DynamicSinkWindowKVCache<Stories> cache(g.sinks, g.window);
    model().set_max_chunk(3);  // the prompt goes in chunks, the rest one token at a time
    GenerationOptions opt;
    opt.max_new_tokens = g.steps + 1 - static_cast<int>(g.prompt_ids.size());
    opt.stop_at_eos = false;
    opt.echo_prompt = true;
    std::string text;
    const auto res = generate(model(), tok, cache, std::span<const TokenId>(g.prompt_ids), opt, [&](std::string_view p) {
      text += p;
      return true;
    });
    model().set_max_chunk(512);
    INFO(g.name);
    REQUIRE(res.tokens == std::vector<TokenId>(g.ids.begin() + static_cast<std::ptrdiff_t>(g.prompt_ids.size()), g.ids.end()));
    REQUIRE(text == g.text);
  }
}

TEST_CASE("the compile-time sink+window cache behaves as the run-time one", "[streaming]") {
  // Its sizes are in the type: those of the golden of 4 sinks and a window of 60, which must be there.
  int ran = 0;
  for (const auto& g : test::goldens("sink_window")) {
    if (g.sinks != 4 || g.window != 60) continue;
    SinkWindowKVCache<Stories, 4, 60> cache;
    REQUIRE(cache.capacity() == 64);
    run_chunked(g, cache, 17);
    ++ran;
  }
  INFO("no sink+window golden of 4 sinks and a window of 60 in " << (test::data_dir() / "golden").string());
  REQUIRE(ran > 0);
}

TEST_CASE("sink+window memory is fixed at sinks + window positions", "[streaming]") {
  DynamicSinkWindowKVCache<Stories> small(4, 60), large(4, 252);
  const std::size_t per_position = 2 * sizeof(float) * Stories::KVDim * Stories::Layers;
  REQUIRE(small.bytes() == 64 * per_position);
  REQUIRE(large.bytes() == 256 * per_position);
  REQUIRE_THROWS_WITH(DynamicSinkWindowKVCache<Stories>(4, 600), Catch::Contains("MaxSeq 512"));
  REQUIRE_THROWS_AS(DynamicSinkWindowKVCache<Stories>(2, 0), InputError);
  REQUIRE_THROWS_AS(DynamicSinkWindowKVCache<Stories>(-1, 10), InputError);
}

TEST_CASE("RoPE re-rotation by d equals rotation at p + d, for p up to 10^7", "[streaming][rope]") {
  std::mt19937_64 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int head_dim : {8, 64, 128}) {
    const kernels::Rope rope(head_dim, 10000.0);
    std::vector<float> cosx(static_cast<std::size_t>(rope.table_len())), sinx(cosx.size());
    for (int trial = 0; trial < 300; ++trial) {
      const std::int64_t p = static_cast<std::int64_t>(gen() % 10'000'001);
      const std::int64_t d = static_cast<std::int64_t>(gen() % 2'000'001) - 1'000'000 - (trial % 3 == 0 ? p : 0);
      const std::size_t n = static_cast<std::size_t>(head_dim) * 4;
      std::vector<float> k(n);
      for (auto& x : k) x = normal(gen);
      auto moved = k, direct = k, twin = k;
      rope.table(p, cosx.data(), sinx.data());
      kernels::rope_apply(moved.data(), n, cosx.data(), sinx.data(), cosx.size());
      twin = moved;
      kernels::rope_rerotate(rope, moved.data(), n, d, cosx.data(), sinx.data());
      kernels::scalar::rope_rerotate(twin.data(), n, head_dim, d, 10000.0);
      kernels::scalar::rope_rotate(direct.data(), n, head_dim, p + d, 10000.0);
      for (std::size_t i = 0; i < n; i += 2) {
        // Relative to the pair's norm, which rotation preserves.
        const float norm = std::hypot(k[i], k[i + 1]);
        INFO("head_dim " << head_dim << " p " << p << " d " << d << " element " << i);
        REQUIRE(std::abs(moved[i] - direct[i]) <= 1e-5f * norm);
        REQUIRE(std::abs(moved[i + 1] - direct[i + 1]) <= 1e-5f * norm);
        REQUIRE(std::abs(moved[i] - twin[i]) <= 1e-6f * norm);
      }
    }
  }
}

TEST_CASE("a million-token sink+window stream keeps its memory, stays finite and does not drift", "[.slow][streaming]") {
  // Teacher-forced on a repeated story: once the stream is past S + W, the
  // cache holds the same tokens at the same cache positions every period,
  // so the logits must repeat exactly, at position 10^6 as at the start.
  const auto g = test::goldens("dense").front();
  std::vector<TokenId> period(g.ids.begin() + 1, g.ids.end());  // no BOS inside the loop
  const auto P = static_cast<std::int64_t>(period.size());
  constexpr std::int64_t kTokens = 1'000'000, S = 4, W = 252, kChunk = 512;
  DynamicSinkWindowKVCache<Stories> cache(S, W);
  const std::size_t bytes = cache.bytes();
  struct rusage before {};
  getrusage(RUSAGE_SELF, &before);

  std::vector<TokenId> chunk;
  std::vector<float> early, late;
  const std::int64_t probe_early = S + W + 3 * P, probe_late = probe_early + (kTokens - 2 * P - probe_early) / P * P;
  for (std::int64_t pos = 0; pos < kTokens; pos += kChunk) {
    chunk.clear();
    for (std::int64_t i = pos; i < std::min(kTokens, pos + kChunk); ++i)
      chunk.push_back(i == 0 ? 1 : period[static_cast<std::size_t>((i - 1) % P)]);
    const Llama<Stories>::Sequence seq{&cache, chunk, true};
    const auto out = model().forward({&seq, 1});
    for (std::int64_t probe : {probe_early, probe_late}) {
      if (probe < pos || probe >= pos + static_cast<std::int64_t>(chunk.size())) continue;
      const auto row = out.row(0, static_cast<std::size_t>(probe - pos));
      (probe == probe_early ? early : late).assign(row.begin(), row.end());
    }
    const auto last = out.row(0, chunk.size() - 1);
    for (float x : last) REQUIRE(std::isfinite(x));
  }
  struct rusage after {};
  getrusage(RUSAGE_SELF, &after);
  REQUIRE(cache.size() == kTokens);
  REQUIRE(cache.bytes() == bytes);
  REQUIRE(cache.occupancy() == S + W);
  REQUIRE(after.ru_maxrss - before.ru_maxrss < 16 * 1024);  // KiB: nothing grew with the stream
  REQUIRE(late.size() == early.size());
  const float drift = test::max_abs_diff(late, early);
  std::cout << "1M-token stream: logits at position " << probe_late << " vs " << probe_early
            << " (same cache content): max |diff| " << drift << "\n";
  REQUIRE(drift <= 1e-3f);
}
