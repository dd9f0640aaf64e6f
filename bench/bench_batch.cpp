// Continuous batching on a CPU: aggregate decode tokens/s of B sequences
// decoded together (one forward per step, each weight read once for all B),
// TinyLlama-1.1B shape, random weights, F16, BF16, Q8_0 and Q4_0.
#include <chrono>
#include <memory>
#include <random>

#include "bench_support.hpp"

namespace {

using namespace streamllm;
using Tiny = presets::TinyLlama1B;
using Clock = std::chrono::steady_clock;

Llama<Tiny>& model(const std::string& type) { return bench::tinyllama(type); }

// args: threads, B. Each sequence has a 32-token prompt in its cache; the
// timed part is 16 batched decode steps.
void batched_decode(benchmark::State& state, const std::string& type) {
  constexpr int kSteps = 16, kPrompt = 32;
  auto& m = model(type);
  bench::set_threads(state);
  const auto B = static_cast<std::size_t>(state.range(1));
  std::mt19937 gen(5);
  std::vector<std::unique_ptr<KVCache<Tiny>>> caches;
  std::vector<std::vector<TokenId>> tokens(B);
  for (std::size_t b = 0; b < B; ++b) {
    caches.push_back(std::make_unique<KVCache<Tiny>>(kPrompt + kSteps * 64));
    for (int i = 0; i < kPrompt + kSteps; ++i) tokens[b].push_back(static_cast<TokenId>(gen() % 31000) + 3);
  }
  std::vector<Llama<Tiny>::Sequence> seqs(B);
  for (auto _ : state) {
    for (std::size_t b = 0; b < B; ++b) {
      caches[b]->clear();
      m.prefill({tokens[b].data(), kPrompt}, *caches[b]);
    }
    const auto t0 = Clock::now();
    for (int s = 0; s < kSteps; ++s) {
      for (std::size_t b = 0; b < B; ++b) seqs[b] = {caches[b].get(), {tokens[b].data() + kPrompt + s, 1}, false};
      benchmark::DoNotOptimize(m.forward(seqs).last(0).data());
    }
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(B * kSteps * state.iterations()), benchmark::Counter::kIsRate);
  state.counters["B"] = static_cast<double>(B);
}

void register_all() {
  for (const char* t : {"f16", "bf16", "q8_0", "q4_0"}) {
    const std::string type = t;
    benchmark::RegisterBenchmark(("BatchedDecode/" + type).c_str(), [type](benchmark::State& s) { batched_decode(s, type); })
        ->ArgsProduct({{2}, {1, 2, 4, 8, 16}})
        ->ArgNames({"threads", "B"})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2);
  }
}

}  // namespace

int main(int argc, char** argv) { return bench::run_registered(argc, argv, register_all); }
