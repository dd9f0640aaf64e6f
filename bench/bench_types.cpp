// TinyLlama-1.1B shape, random weights (std 0.02) in each weight type, written
// through our GGUF writer: prefill (pp128, pp512), a chat turn's prefill
// (8-96 tokens after 256 and after 1024) and decode (tg128 from an empty cache, and 32
// tokens at depth 1024), 1 and 2 threads.
//
// Counters: tok/s; decode GB/s = bytes of the weight matrices x tok/s;
// prefill GFLOP/s = 2 x (layer matmul parameters x tokens + the classifier
// once, for the last token) per second; read%: decode's GB/s as a share of
// the read roof the ReadRoof rows measure first in the same run (rd's
// read-sum, read_roof.hpp); peak%: prefill's as a share of the peak of the
// unit the type's prefill runs on (bench_support.hpp; set the
// STREAMLLM_BENCH_*_GOPS/GFLOPS limits to what machine-limits/peak measures).
//
//   bench_types --benchmark_filter='Q4_0'      (files go to $TMPDIR/streamllm-bench)
#include <chrono>
#include <map>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace {

using namespace streamllm;
using Tiny = presets::TinyLlama1B;
using Clock = std::chrono::steady_clock;

Llama<Tiny>& model(const std::string& type) { return bench::tinyllama(type); }

std::vector<TokenId> tokens(std::size_t n) {
  std::mt19937 gen(3);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(gen() % 31000) + 3;
  t[0] = 1;
  return t;
}

// The unit most of a file's prefill runs on: that of its recipe's main type.
bench::ComputeUnit prefill_unit(const std::string& type) {
  return bench::compute_unit(loaders::recipe_info(loaders::parse_recipe(type)).type);
}

// args: threads, prompt tokens
void prefill(benchmark::State& state, const std::string& type) {
  auto& m = model(type);
  bench::set_threads(state);
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto ids = tokens(n);
  auto cache = std::make_unique<KVCache<Tiny>>();
  for (auto _ : state) {
    cache->clear();
    benchmark::DoNotOptimize(m.prefill(ids, *cache).data());
  }
  const double tok = static_cast<double>(n * state.iterations());
  state.counters["tok/s"] = benchmark::Counter(tok, benchmark::Counter::kIsRate);
  const double flops = 2 * static_cast<double>(state.iterations()) * bench::prefill_matmul_params<Tiny>(static_cast<double>(n));
  bench::report_compute(state, "GFLOP/s", flops, prefill_unit(type), static_cast<int>(state.range(0)));
}

// args: threads, depth, tokens: a chat turn's prefill, `tokens` new ones
// after `depth` in the cache (filled once, not timed, and cut back to
// `depth` before each run). A turn is a few tokens to a few tens: what
// the tiles waste on padding and what reading the weights costs show here,
// not in pp128.
void turn(benchmark::State& state, const std::string& type) {
  auto& m = model(type);
  bench::set_threads(state);
  const auto depth = static_cast<std::size_t>(state.range(1)), n = static_cast<std::size_t>(state.range(2));
  const auto ids = tokens(depth + n);
  auto cache = std::make_unique<KVCache<Tiny>>();
  m.prefill({ids.data(), depth}, *cache);
  for (auto _ : state) {
    cache->truncate(static_cast<std::int64_t>(depth));
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(m.prefill({ids.data() + depth, n}, *cache).data());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double tok = static_cast<double>(n * state.iterations());
  state.counters["tok/s"] = benchmark::Counter(tok, benchmark::Counter::kIsRate);
  const double flops = 2 * static_cast<double>(state.iterations()) * bench::prefill_matmul_params<Tiny>(static_cast<double>(n));
  bench::report_compute(state, "GFLOP/s", flops, prefill_unit(type), static_cast<int>(state.range(0)));
}

// args: threads, depth, steps. The cache is refilled to `depth` (not timed)
// before each timed run of `steps` decode steps.
void decode(benchmark::State& state, const std::string& type) {
  auto& m = model(type);
  bench::set_threads(state);
  const auto depth = static_cast<std::size_t>(state.range(1)), steps = static_cast<std::size_t>(state.range(2));
  const auto ids = tokens(depth + steps + 1);
  auto cache = std::make_unique<KVCache<Tiny>>();
  for (auto _ : state) {
    cache->clear();
    if (depth > 0) m.prefill({ids.data(), depth}, *cache);
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < steps; ++i) benchmark::DoNotOptimize(m.decode(ids[depth + i], *cache).data());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double tok = static_cast<double>(steps * state.iterations());
  state.counters["tok/s"] = benchmark::Counter(tok, benchmark::Counter::kIsRate);
  bench::report_read(state, tok * bench::weight_bytes_per_token(m.weights()), static_cast<int>(state.range(0)));
}

void register_all() {
  bench::register_read_roof();
  for (const char* t : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q5_0", "q3_k_m", "q2_k", "iq4_xs", "iq4_nl"}) {
    const std::string type = t;
    benchmark::RegisterBenchmark(("Prefill/" + type).c_str(), [type](benchmark::State& s) { prefill(s, type); })
        ->ArgsProduct({{1, 2}, {128, 512}})
        ->ArgNames({"threads", "tokens"})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->Iterations(2);
    benchmark::RegisterBenchmark(("Decode/" + type).c_str(), [type](benchmark::State& s) { decode(s, type); })
        ->Args({1, 0, 128})
        ->Args({2, 0, 128})
        ->Args({1, 1024, 32})
        ->Args({2, 1024, 32})
        ->ArgNames({"threads", "depth", "steps"})
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime()
        ->Iterations(1);
  }
  for (const char* t : {"f16", "q8_0", "q4_0", "q4_k_m"}) {
    const std::string type = t;
    benchmark::RegisterBenchmark(("Turn/" + type).c_str(), [type](benchmark::State& s) { turn(s, type); })
        ->ArgsProduct({{2}, {256, 1024}, {8, 12, 16, 18, 24, 32, 38, 40, 48, 64, 72, 96}})
        ->ArgNames({"threads", "depth", "tokens"})
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime()
        ->Iterations(4);
  }
}

}  // namespace

int main(int argc, char** argv) { return bench::run_registered(argc, argv, register_all); }
