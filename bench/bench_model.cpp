// Prefill and decode of the f32 model: stories260K (the real checkpoint) and
// a stories110M-shaped model with random weights.
//
// Counters: tok/s; decode GB/s = weight bytes read per token x tok/s;
// prefill GFLOP/s = 2 x matmul parameters x tok/s; each also as a percentage
// of this machine's read roof or FP32 peak (read%, peak%: bench_support.hpp).
#include <chrono>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace {

using namespace streamllm;
using Clock = std::chrono::steady_clock;

template <class Config>
Llama<Config>& model_for(const std::string& path) {
  static Llama<Config> m = load_llama<Config>(path);
  return m;
}

std::vector<TokenId> random_tokens(std::size_t n, int vocab) {
  std::mt19937 gen(7);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(gen() % static_cast<unsigned>(vocab - 3)) + 3;
  t[0] = 1;
  return t;
}

// args: threads, prompt tokens
template <class Config>
void prefill(benchmark::State& state, Llama<Config>& model) {
  bench::set_threads(state);
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto tokens = random_tokens(n, Config::Vocab);
  auto cache = std::make_unique<KVCache<Config>>();
  for (auto _ : state) {
    cache->clear();
    benchmark::DoNotOptimize(model.prefill(tokens, *cache).data());
  }
  const double tok_s = static_cast<double>(n * state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(n * state.iterations()));
  state.counters["tok/s"] = benchmark::Counter(tok_s, benchmark::Counter::kIsRate);
  const double flops = 2 * static_cast<double>(state.iterations()) * bench::prefill_matmul_params<Config>(static_cast<double>(n));
  bench::report_compute(state, "GFLOP/s", flops, bench::ComputeUnit::Fp32, static_cast<int>(state.range(0)));
}

// args: threads, depth. Each iteration refills the cache to `depth` (not
// timed), then times kSteps decode steps.
template <class Config>
void decode(benchmark::State& state, Llama<Config>& model) {
  constexpr int kSteps = 32;
  bench::set_threads(state);
  const auto depth = static_cast<std::size_t>(state.range(1));
  const auto tokens = random_tokens(depth + kSteps + 1, Config::Vocab);
  auto cache = std::make_unique<KVCache<Config>>();
  for (auto _ : state) {
    cache->clear();
    if (depth > 0) model.prefill({tokens.data(), depth}, *cache);
    const auto t0 = Clock::now();
    for (int i = 0; i < kSteps; ++i)
      benchmark::DoNotOptimize(model.decode(tokens[depth + static_cast<std::size_t>(i)], *cache).data());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double tok = static_cast<double>(kSteps * state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(tok));
  state.counters["tok/s"] = benchmark::Counter(tok, benchmark::Counter::kIsRate);
  bench::report_read(state, tok * 4 * bench::matmul_params<Config>(), static_cast<int>(state.range(0)));
}

using S260 = presets::Stories260K;
using S110 = presets::Stories110M;

Llama<S260>& stories260k() { return model_for<S260>((bench::data_dir() / "models" / "stories260K.bin").string()); }
Llama<S110>& stories110m() { return model_for<S110>(bench::random_llama2c_model<S110>("stories110M")); }

void BM_Prefill_Stories260K(benchmark::State& s) { prefill(s, stories260k()); }
void BM_Decode_Stories260K(benchmark::State& s) { decode(s, stories260k()); }
void BM_Prefill_Stories110M(benchmark::State& s) { prefill(s, stories110m()); }
void BM_Decode_Stories110M(benchmark::State& s) { decode(s, stories110m()); }

}  // namespace

BENCHMARK(BM_Prefill_Stories260K)
    ->ArgsProduct({{1, 2}, {128, 512}})
    ->ArgNames({"threads", "tokens"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Decode_Stories260K)
    ->ArgsProduct({{1, 2}, {0, 256}})
    ->ArgNames({"threads", "depth"})
    ->Unit(benchmark::kMicrosecond)
    ->UseManualTime();
BENCHMARK(BM_Prefill_Stories110M)
    ->ArgsProduct({{1, 2}, {128, 512}})
    ->ArgNames({"threads", "tokens"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Decode_Stories110M)
    ->ArgsProduct({{1, 2}, {0, 256}})
    ->ArgNames({"threads", "depth"})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

BENCHMARK_MAIN();
