// StreamingLLM and chat timings on a stories110M-shaped model with random
// weights (written by the benchmark):
//  - time to first token of a new 50-token turn after H tokens of history,
//    with KV reuse (prefill the turn only) vs recomputing the whole history;
//  - sink+window decode at stream positions 1K, 100K and 1M;
//  - sink+window decode vs the sliding window with recomputation (the
//    baseline of the StreamingLLM paper), cache 4 + 508.
#include <chrono>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace {

using namespace streamllm;
using Clock = std::chrono::steady_clock;
using S110 = presets::Stories110M;
constexpr int kSinks = 4, kWindow = 508, kTurn = 50;

Llama<S110>& model() {
  static Llama<S110> m = load_llama<S110>(bench::random_llama2c_model<S110>("stories110M"));
  return m;
}

std::vector<TokenId> tokens(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(gen() % 31000) + 3;
  t[0] = 1;
  return t;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// args: threads, history tokens. The cache holds the history (not timed);
// the timed part prefills the new turn and samples its first token.
void BM_TurnTTFT_KVReuse(benchmark::State& state) {
  bench::set_threads(state);
  const auto history = static_cast<std::size_t>(state.range(1));
  const auto ids = tokens(history + kTurn, 1);
  KVCache<S110> cache(2048);  // 1000 + 50 goes past the trained 1024: fine for timing
  for (auto _ : state) {
    cache.clear();
    model().prefill({ids.data(), history}, cache);
    const auto t0 = Clock::now();
    const auto logits = model().prefill({ids.data() + history, std::size_t(kTurn)}, cache);
    benchmark::DoNotOptimize(argmax(logits));
    state.SetIterationTime(seconds_since(t0));
  }
  state.counters["prefilled"] = kTurn;
}

// The same turn when the whole history is recomputed with it.
void BM_TurnTTFT_Recompute(benchmark::State& state) {
  bench::set_threads(state);
  const auto history = static_cast<std::size_t>(state.range(1));
  const auto ids = tokens(history + kTurn, 1);
  KVCache<S110> cache(2048);
  for (auto _ : state) {
    cache.clear();
    const auto t0 = Clock::now();
    const auto logits = model().prefill(ids, cache);
    benchmark::DoNotOptimize(argmax(logits));
    state.SetIterationTime(seconds_since(t0));
  }
  state.counters["prefilled"] = static_cast<double>(ids.size());
}

// A sink+window cache that can jump ahead in the stream: decode costs the
// same at any position once the window is full (the same keys are read and
// one RoPE table is computed), so the benchmark fills the window for real
// and then moves the position counter instead of decoding a million tokens.
struct SkippingCache : DynamicSinkWindowKVCache<S110> {
  SkippingCache() : DynamicSinkWindowKVCache<S110>(kSinks, kWindow) {}
  void skip_to(std::int64_t position) { size_ = std::max(size_, position); }
};

// args: threads, stream position
void BM_SinkWindowDecode(benchmark::State& state) {
  constexpr int kSteps = 16;
  bench::set_threads(state);
  const auto position = state.range(1);
  const auto ids = tokens(1024 + kSteps, 2);
  SkippingCache cache;
  model().prefill({ids.data(), 1024}, cache);  // the window is full from here on
  cache.skip_to(position);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kSteps; ++i)
      benchmark::DoNotOptimize(model().decode(ids[1024 + static_cast<std::size_t>(i)], cache).data());
    state.SetIterationTime(seconds_since(t0));
  }
  state.SetItemsProcessed(state.iterations() * kSteps);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * kSteps), benchmark::Counter::kIsRate);
  state.counters["position"] = static_cast<double>(cache.size());
}

// The StreamingLLM paper's "sliding window with re-computation": every new
// token rebuilds the cache from the last sinks + window tokens.
void BM_SlidingWindowRecompute(benchmark::State& state) {
  bench::set_threads(state);
  const auto ids = tokens(kSinks + kWindow, 3);
  KVCache<S110> cache;
  for (auto _ : state) {
    cache.clear();
    benchmark::DoNotOptimize(model().prefill(ids, cache).data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_TurnTTFT_KVReuse)
    ->ArgsProduct({{1, 2}, {500, 1000}})
    ->ArgNames({"threads", "history"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_TurnTTFT_Recompute)
    ->ArgsProduct({{1, 2}, {500, 1000}})
    ->ArgNames({"threads", "history"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK(BM_SinkWindowDecode)
    ->ArgsProduct({{1, 2}, {1000, 100000, 1000000}})
    ->ArgNames({"threads", "position"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SlidingWindowRecompute)->ArgsProduct({{1, 2}})->ArgNames({"threads"})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
