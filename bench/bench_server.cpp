// The completion server under load: C concurrent streaming clients on
// loopback (a bounded load generator: each client sends a fixed number of
// requests), reporting requests/s and the p50 / p99 time to first token.
// TinyLlama-1.1B shape, random weights, Q4_0, 2 threads.
#include "bench_support.hpp"  // before httplib (see server.hpp)

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "server.hpp"

namespace {

using namespace streamllm;
using Tiny = presets::TinyLlama1B;
using Clock = std::chrono::steady_clock;

// args: concurrent clients
void server_load(benchmark::State& state) {
  constexpr int kRequestsPerClient = 2, kMaxTokens = 32;
  omp_set_num_threads(2);
  static auto model = load_llama<Tiny>(bench::random_gguf_model<Tiny>("tinyllama", "q4_0"));
  static const auto tok = Tokenizer::load(bench::random_gguf_model<Tiny>("tinyllama", "q4_0"));
  const int clients = static_cast<int>(state.range(0));
  server::Options o;
  o.port = 0;
  o.max_sequences = 16;
  server::CompletionServer<Tiny> srv(model, tok, o);
  const int port = srv.bind();
  std::thread serving([&] { srv.serve(); });
  while (!srv.running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  std::vector<double> ttft;
  std::mutex mu;
  for (auto _ : state) {
    ttft.clear();
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c)
      threads.emplace_back([&, c] {
        httplib::Client client("127.0.0.1", port);
        client.set_read_timeout(600, 0);
        for (int r = 0; r < kRequestsPerClient; ++r) {
          const nlohmann::json req = {{"prompt", "Once upon a time, in a town by the sea, client " + std::to_string(c)},
                                      {"max_tokens", kMaxTokens}, {"temperature", 0}, {"stream", true}};
          const auto start = Clock::now();
          bool first = true;
          server::post_streaming(client, "/v1/completions", req.dump(), [&](const char*, std::size_t) {
            if (first) {
              first = false;
              std::lock_guard lock(mu);
              ttft.push_back(std::chrono::duration<double>(Clock::now() - start).count());
            }
            return true;
          });
        }
      });
    for (auto& t : threads) t.join();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(ttft.begin(), ttft.end());
  auto pct = [&](double p) { return ttft.empty() ? 0.0 : ttft[std::min(ttft.size() - 1, static_cast<std::size_t>(p * ttft.size()))]; };
  state.counters["requests/s"] = benchmark::Counter(static_cast<double>(clients * kRequestsPerClient * state.iterations()),
                                                    benchmark::Counter::kIsRate);
  state.counters["ttft_p50_ms"] = 1e3 * pct(0.50);
  state.counters["ttft_p99_ms"] = 1e3 * pct(0.99);
  srv.stop();
  serving.join();
}

}  // namespace

BENCHMARK(server_load)->Arg(8)->Arg(32)->ArgNames({"clients"})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_MAIN();
