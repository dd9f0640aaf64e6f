// Tensor parallel against one process, on the TinyLlama-1.1B shape (random
// weights the benchmark writes) in Q8_0, Q4_0 and BF16: prefill of 512
// tokens (pp512), decode of 128 (tg128) and batched decode of 8 sequences.
//
//   bench_tensor_parallel                      one process, every core
//   mpirun -np 2 bench_tensor_parallel          two ranks of one thread each, over shared memory
//   mpirun -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo bench_tensor_parallel     over TCP loopback
//
// STREAMLLM_BENCH_TYPE picks the weight type (q8_0 by default), STREAMLLM_BENCH_ISA=avx2
// the kernels of a CPU without AVX-512;
// scripts/bench-tensor-parallel.sh runs the three for each type in one go. Rank 0 runs the
// benchmarks; the other ranks follow its calls. Counters beside tokens/s:
// the all-reduce's time per token (and share of the step) and bytes per
// token, and the largest resident memory of a rank (the ranks share this
// machine, so rank 0 reads the others' from /proc).
#include <unistd.h>

#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "streamllm/parallel/tensor_parallel.hpp"

namespace {

using namespace streamllm;
using Config = presets::TinyLlama1B;

template <class Model>
struct ConfigOf;
template <class C>
struct ConfigOf<Llama<C>> {
  using type = C;
};

// Resident memory of a process of this machine, in MiB.
double rss_mib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct Job {
  std::vector<int> pids;                       // of every rank
  const parallel::LinkStats* stats = nullptr;  // rank 0's link (none in one process)
  std::function<void()> reset_stats = [] {};
  // Adds the link's figures since the last reset_stats to `sum`: each
  // iteration's timed part only, whatever its untimed setup sent.
  void add_stats(parallel::LinkStats& sum) const {
    if (stats) sum += *stats;
  }
  double max_rss() const {
    double m = 0;
    for (int p : pids) m = std::max(m, rss_mib(p));
    return m;
  }
};

template <class Model>
void report(benchmark::State& state, const Job& job, const parallel::LinkStats& s, double tokens, double seconds) {
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["rank_rss_MiB"] = job.max_rss();
  if (!job.stats) return;
  state.counters["allreduce_us/tok"] = 1e6 * s.all_reduce_s / tokens;
  state.counters["allreduce_share"] = s.all_reduce_s / seconds;
  state.counters["allreduce_B/tok"] = static_cast<double>(s.all_reduce_bytes) / tokens;
  state.counters["gather_us/tok"] = 1e6 * s.gather_s / tokens;
}

// pp512: a prompt of 512 tokens into an empty cache.
template <class Model>
void prefill(benchmark::State& state, Model& model, const Job& job) {
  using Shape = typename ConfigOf<Model>::type;
  std::vector<TokenId> prompt(512);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(1 + (i * 7919) % (Config::Vocab - 1));
  double seconds = 0;
  parallel::LinkStats timed;
  for (auto _ : state) {
    KVCache<Shape> cache(512);
    job.reset_stats();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(model.prefill(prompt, cache).data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.add_stats(timed);
  }
  report<Model>(state, job, timed, 512.0 * static_cast<double>(state.iterations()), seconds);
}

// tg128: 128 tokens one at a time after a 16-token prompt (not timed).
template <class Model>
void decode(benchmark::State& state, Model& model, const Job& job) {
  using Shape = typename ConfigOf<Model>::type;
  double seconds = 0;
  parallel::LinkStats timed;
  for (auto _ : state) {
    state.PauseTiming();
    KVCache<Shape> cache(256);
    std::vector<TokenId> prompt(16, 42);
    prompt[0] = 1;
    model.prefill(prompt, cache);
    job.reset_stats();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 128; ++i) benchmark::DoNotOptimize(model.decode(static_cast<TokenId>(100 + i), cache).data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.add_stats(timed);
  }
  report<Model>(state, job, timed, 128.0 * static_cast<double>(state.iterations()), seconds);
}

// Batched decode: 8 sequences, 32 steps of one token each.
template <class Model>
void batch8(benchmark::State& state, Model& model, const Job& job) {
  using Shape = typename ConfigOf<Model>::type;
  constexpr std::size_t B = 8, steps = 32;
  double seconds = 0;
  parallel::LinkStats timed;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::unique_ptr<KVCache<Shape>>> caches;
    for (std::size_t b = 0; b < B; ++b) {
      caches.push_back(std::make_unique<KVCache<Shape>>(64));
      const TokenId first[] = {1, static_cast<TokenId>(200 + b)};
      model.prefill(first, *caches.back());
    }
    job.reset_stats();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<TokenId> next(B);
    std::vector<typename Model::Sequence> seqs(B);
    for (std::size_t s = 0; s < steps; ++s) {
      for (std::size_t b = 0; b < B; ++b) {
        next[b] = static_cast<TokenId>(300 + s * B + b);
        seqs[b] = {caches[b].get(), {&next[b], 1}, false};
      }
      benchmark::DoNotOptimize(model.forward(seqs).last(0).data());
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.add_stats(timed);
  }
  report<Model>(state, job, timed, static_cast<double>(B * steps) * static_cast<double>(state.iterations()), seconds);
}

// Each run lasts 2-3 s on a Zen 5 (more elsewhere): a one-second batch8
// moved by 10-25% between runs with the host's stalls of either core, which
// both ranks wait for at the next all-reduce.
template <class Model>
void run_benchmarks(const std::string& label, Model& model, const Job& job) {
  benchmark::RegisterBenchmark((label + "/pp512").c_str(), [&](benchmark::State& s) { prefill(s, model, job); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2)
      ->UseRealTime();
  benchmark::RegisterBenchmark((label + "/tg128").c_str(), [&](benchmark::State& s) { decode(s, model, job); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2)
      ->UseRealTime();
  benchmark::RegisterBenchmark((label + "/batch8").c_str(), [&](benchmark::State& s) { batch8(s, model, job); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3)
      ->UseRealTime();
  benchmark::RunSpecifiedBenchmarks();
}

// One weight type per run (Google Benchmark runs its list once per program):
// STREAMLLM_BENCH_TYPE, q8_0 by default.
std::string weight_type() {
  const char* v = std::getenv("STREAMLLM_BENCH_TYPE");
  return v && *v ? v : "q8_0";
}

// STREAMLLM_BENCH_CLASSIFIER=rank0 (the classifier on rank 0 alone; default
// sliced) and STREAMLLM_BENCH_ALLREDUCE=bf16 (default f32).
parallel::TensorParallelOptions split_options() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  parallel::TensorParallelOptions opt;
  if (env("STREAMLLM_BENCH_CLASSIFIER") == "rank0") opt.classifier = ClassifierSplit::OnFirstRank;
  if (env("STREAMLLM_BENCH_ALLREDUCE") == "bf16") opt.all_reduce = parallel::AllReducePrecision::BF16;
  opt.mode = bench::load_mode();
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  parallel::MpiRuntime mpi(argc, argv);
  std::optional<kernels::ScopedIsa> forced;  // STREAMLLM_BENCH_ISA=avx2: an AVX2-only CPU's kernels, on every rank
  if (const auto isa = bench::isa_from_env()) forced.emplace(*isa);
  benchmark::Initialize(&argc, argv);
  const int ranks = mpi.size();
  Job job;
  job.pids.resize(static_cast<std::size_t>(ranks));
  const int pid = ::getpid();
  MPI_Allgather(&pid, 1, MPI_INT, job.pids.data(), 1, MPI_INT, mpi.comm());
  try {
    const std::string type = weight_type();
    std::string path;
    parallel::on_every_rank(mpi.comm(), [&] {
      if (mpi.rank() == 0) path = bench::random_gguf_model<Config>("tinyllama", type);
    });
    auto n = static_cast<int>(path.size());  // rank 0's path, on every rank
    MPI_Bcast(&n, 1, MPI_INT, 0, mpi.comm());
    path.resize(static_cast<std::size_t>(n));
    MPI_Bcast(path.data(), n, MPI_CHAR, 0, mpi.comm());
    const parallel::TensorParallelOptions opt = split_options();
    std::string label = type + "/ranks:" + std::to_string(ranks) + "/threads:" + std::to_string(omp_get_max_threads());
    if (ranks > 1)
      label += std::string(opt.classifier == ClassifierSplit::Sliced ? "/classifier:sliced" : "/classifier:rank0") +
               (opt.all_reduce == parallel::AllReducePrecision::F32 ? "/allreduce:f32" : "/allreduce:bf16");
    if (ranks == 1) {
      auto model = load_llama<Config>(path, bench::load_mode());
      run_benchmarks(label, model, job);
    } else if (ranks == 2) {
      parallel::TensorParallelModel<Config, 2> tp(mpi, path, opt);
      if (tp.leads()) {
        job.stats = &tp.link_stats();
        job.reset_stats = [&tp] { tp.reset_link_stats(); };
        run_benchmarks(label, tp.model(), job);
      } else {
        tp.follow();
      }
    } else {
      throw Error("this benchmark runs as one process or as 2 ranks (mpirun -np 2), not " + std::to_string(ranks));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tensor_parallel (rank %d): %s\n", mpi.rank(), e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
