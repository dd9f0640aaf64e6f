// KV cache types at depth: decode after 0, 1024, 2048 and 4000 tokens, and a
// prefill of 4000, with keys and values in f32, f16, bf16, q8_0 and q4_0, on
// Llama 2 7B's widths (4096 / 11008, 32 heads of 128, no grouping, vocab
// 32000) with 4 layers instead of 32: the cache's share of a step is what a
// 32-layer model's is (every layer reads its own cache), and the file (Q4_0,
// random weights, 0.6 GB) is written once, in seconds, where a 7B one would
// take 3.8 GB of disk. llama.cpp reads the same file (llama-batched-bench -fa).
//
// Counters: tok/s; cache MiB (the cache's bytes at 4000 tokens); decode
// GB/s = (weights + the cache's rows read) per token x tok/s, also as a
// share of the read roof (read%).
#include <chrono>
#include <map>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace {

using namespace streamllm;
using Clock = std::chrono::steady_clock;
using Wide = LlamaConfig<4096, 11008, 4, 32, 32, 32000, 4096>;
constexpr std::size_t kDeepest = 4000;

Llama<Wide>& model() {
  static Llama<Wide> m = load_llama<Wide>(bench::random_gguf_model<Wide>("llama2-7b-widths-4-layers", "q4_0"), bench::load_mode());
  return m;
}

std::vector<TokenId> tokens(std::size_t n) {
  std::mt19937 gen(5);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(gen() % 31000) + 3;
  t[0] = 1;
  return t;
}

// One cache per type, filled to kDeepest by the type's prefill benchmark (or
// by the first decode that needs it) and cut back to each depth, deepest first.
std::map<std::string, std::unique_ptr<KVCacheBase<Wide>>>& filled() {
  static std::map<std::string, std::unique_ptr<KVCacheBase<Wide>>> caches;
  return caches;
}

KVCacheBase<Wide>& cache_at(KVTypes types, std::size_t depth) {
  auto& c = filled()[kv_types_name(types)];
  if (!c || c->size() < static_cast<std::int64_t>(depth)) {
    c = std::make_unique<DynamicKVCache<Wide>>(kDeepest + 64, types);
    model().prefill(tokens(kDeepest), *c);
  }
  c->truncate(static_cast<std::int64_t>(depth));
  return *c;
}

// args: threads. A prefill of kDeepest tokens into an empty cache of the type.
void prefill(benchmark::State& state, KVTypes types) {
  bench::set_threads(state);
  const auto ids = tokens(kDeepest);
  for (auto _ : state) {
    auto cache = std::make_unique<DynamicKVCache<Wide>>(kDeepest + 64, types);
    const auto t0 = Clock::now();
    benchmark::DoNotOptimize(model().prefill(ids, *cache).data());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    filled()[kv_types_name(types)] = std::move(cache);
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(kDeepest * state.iterations()), benchmark::Counter::kIsRate);
}

// args: threads, depth. kSteps decode steps after `depth` cached tokens.
void decode(benchmark::State& state, KVTypes types) {
  constexpr std::size_t kSteps = 32;
  bench::set_threads(state);
  const auto depth = static_cast<std::size_t>(state.range(1));
  const auto ids = tokens(kSteps);
  KVCacheBase<Wide>& cache = cache_at(types, depth);
  for (auto _ : state) {
    cache.truncate(static_cast<std::int64_t>(depth));
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < kSteps; ++i) benchmark::DoNotOptimize(model().decode(ids[i], cache).data());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double tok = static_cast<double>(kSteps * state.iterations());
  state.counters["tok/s"] = benchmark::Counter(tok, benchmark::Counter::kIsRate);
  const double per_token = bench::weight_bytes_per_token(model().weights()) +
                           static_cast<double>(cache.position_bytes()) * (static_cast<double>(depth) + kSteps / 2.0);
  state.counters["cache MiB"] = static_cast<double>(cache.position_bytes()) * kDeepest / (1 << 20);
  bench::report_read(state, tok * per_token, static_cast<int>(state.range(0)));
}

void register_all() {
  const KVTypes all[] = {{KVType::F32, KVType::F32},
                         {KVType::F16, KVType::F16},
                         {KVType::BF16, KVType::BF16},
                         {KVType::Q8_0, KVType::Q8_0},
                         {KVType::Q4_0, KVType::Q4_0}};
  for (const KVTypes t : all) {
    const std::string name = std::string(kv_type_name(t.k)) + "-" + std::string(kv_type_name(t.v));
    benchmark::RegisterBenchmark(("Prefill4000/" + name).c_str(), [t](benchmark::State& s) { prefill(s, t); })
        ->Arg(2)
        ->ArgName("threads")
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime();
    benchmark::RegisterBenchmark(("Decode/" + name).c_str(), [t](benchmark::State& s) { decode(s, t); })
        ->ArgsProduct({{2}, {4000, 2048, 1024, 0}})  // deepest first: each cuts the filled cache back
        ->ArgNames({"threads", "depth"})
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime();
  }
}

}  // namespace

int main(int argc, char** argv) { return bench::run_registered(argc, argv, register_all); }
