// Shared pieces of the benchmarks: model files they write themselves, and
// the counters every benchmark reports.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "data_dir.hpp"
#include "read_roof.hpp"
#include "streamllm/loaders/convert.hpp"
#include "streamllm/streamllm.hpp"

namespace bench {

using examples::data_dir;

// STREAMLLM_BENCH_NO_MMAP=1: weights read into huge-page memory (compare
// with llama-bench -mmp 0); otherwise mapped (llama-bench's default).
inline streamllm::LoadMode load_mode() {
  const char* v = std::getenv("STREAMLLM_BENCH_NO_MMAP");
  return v && *v == '1' ? streamllm::LoadMode::InMemory : streamllm::LoadMode::Mapped;
}

inline std::filesystem::path scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  auto dir = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / "streamllm-bench";
  std::filesystem::create_directories(dir);
  return dir;
}

// Normal(0, std) floats from a fixed seed (Box-Muller over xoshiro).
inline void fill_normal(float* out, std::size_t n, float std, std::uint64_t seed) {
  streamllm::Rng rng(seed);
  for (std::size_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(rng.next() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)) * std;
    out[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
}

// A llama2.c checkpoint of the preset's shape with random weights (std 0.02,
// norms 1), written once per shape into the scratch folder.
template <class Config>
std::string random_llama2c_model(const std::string& name) {
  const auto path = scratch_dir() / (name + "-random.bin");
  const streamllm::ModelShape s = Config::shape();
  const auto floats = static_cast<std::size_t>(streamllm::loaders::llama2c_float_count(s, true).value());
  const auto bytes = streamllm::loaders::kLlama2cHeaderBytes + floats * 4;
  if (std::filesystem::exists(path) && std::filesystem::file_size(path) == bytes) return path.string();
  std::vector<float> w(floats);
  fill_normal(w.data(), floats, 0.02f, 42);
  // Norm weights are 1, so activations keep a sensible scale.
  const std::size_t D = Config::Dim, L = Config::Layers, V = Config::Vocab, H = Config::HiddenDim, KV = Config::KVDim;
  std::size_t at = V * D;
  std::fill_n(w.begin() + static_cast<std::ptrdiff_t>(at), L * D, 1.0f);  // rms_att
  at += L * D + L * (2 * D * D + 2 * KV * D);
  std::fill_n(w.begin() + static_cast<std::ptrdiff_t>(at), L * D, 1.0f);  // rms_ffn
  at += L * D + L * 3 * H * D;
  std::fill_n(w.begin() + static_cast<std::ptrdiff_t>(at), D, 1.0f);  // rms_final
  streamllm::loaders::write_llama2c(path.string(), s, true, w);
  return path.string();
}

// A GGUF model of the preset's shape with random weights (std 0.02, norms 1,
// an untied output), in one weight type, written once through our writer
// with the Llama 2 tokenizer's metadata (so llama.cpp loads the same file).
template <class Config>
std::string random_gguf_model(const std::string& name, const std::string& type) {
  const auto path = scratch_dir() / (name + "-random-" + type + ".gguf");
  if (std::filesystem::exists(path)) return path.string();
  const auto recipe = streamllm::loaders::parse_recipe(type);
  const streamllm::ModelShape s = Config::shape();
  streamllm::formats::GgufWriter w;
  streamllm::loaders::write_llama_metadata(w, s, recipe, name + "-random");
  streamllm::loaders::write_tokenizer(
      w, streamllm::formats::SentencePieceModel::read((data_dir() / "models" / "tokenizer.model").string()));
  const std::int64_t D = s.dim, H = s.hidden_dim, KV = s.kv_heads * (s.dim / s.heads);
  std::vector<float> buf;
  std::uint64_t seed = 1;
  auto add = [&](const std::string& tensor, std::vector<std::int64_t> dims) {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    buf.resize(static_cast<std::size_t>(n));
    if (dims.size() == 1)
      std::fill(buf.begin(), buf.end(), 1.0f);
    else
      fill_normal(buf.data(), buf.size(), 0.02f, seed++);
    streamllm::loaders::add_converted_tensor(w, recipe, tensor, dims, buf.data(), s.layers, s.heads / s.kv_heads, false);
  };
  add("token_embd.weight", {D, s.vocab});
  for (std::int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {D});
    add(p + "attn_q.weight", {D, D});
    add(p + "attn_k.weight", {D, KV});
    add(p + "attn_v.weight", {D, KV});
    add(p + "attn_output.weight", {D, D});
    add(p + "ffn_norm.weight", {D});
    add(p + "ffn_gate.weight", {D, H});
    add(p + "ffn_down.weight", {H, D});
    add(p + "ffn_up.weight", {D, H});
  }
  add("output_norm.weight", {D});
  add("output.weight", {D, s.vocab});
  const auto tmp = path.string() + ".part";
  w.write(tmp);
  std::filesystem::rename(tmp, path);
  return path.string();
}

// Bytes of every weight matrix a decode step reads (all but the embedding).
template <class Config>
double weight_bytes_per_token(const streamllm::ModelWeights<Config>& w) {
  double b = static_cast<double>(w.classifier.bytes());
  for (const auto& l : w.layers)
    for (const auto* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) b += static_cast<double>(t->bytes());
  return b;
}

// Multiply-adds per token in the weight matrices (what decode GB/s is
// counted from): every linear layer and the classifier.
template <class Config>
constexpr double matmul_params() {
  const double D = Config::Dim, H = Config::HiddenDim, KV = Config::KVDim, L = Config::Layers, V = Config::Vocab;
  return L * (2 * D * D + 2 * KV * D + 3 * H * D) + V * D;
}

// Multiply-adds of a prefill of n tokens: every linear layer for each token,
// the classifier for the last one only (prefill returns its logits alone).
template <class Config>
constexpr double prefill_matmul_params(double n) {
  const double classifier = static_cast<double>(Config::Vocab) * Config::Dim;
  return n * (matmul_params<Config>() - classifier) + classifier;
}

// This machine's compute limits, which the benchmarks report their rates
// against (counter "peak%"). The defaults are the reference figures of the
// 2-core Zen 5 this project is measured on (issue 4): per thread FP32 FMA 272
// GFLOP/s, BF16 dot 545 and INT8 VNNI 1092 GOP/s. On another machine measure
// them with ../shared/tools/machine-limits/peak and set the variables below.
// The read roof (counter "read%") is measured in the run itself: read_roof().
struct MachineLimits {
  double fp32_gflops = 272, bf16_gflops = 545, vnni_gops = 1092;  // one thread
};

inline double limit_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x > 0) || !std::isfinite(x))
    throw std::invalid_argument(std::string(name) + "=\"" + v + "\": expected a positive number");
  return x;
}

inline const MachineLimits& machine_limits() {
  static const MachineLimits limits = [] {
    MachineLimits m;
    m.fp32_gflops = limit_from_env("STREAMLLM_BENCH_FP32_GFLOPS", m.fp32_gflops);
    m.bf16_gflops = limit_from_env("STREAMLLM_BENCH_BF16_GFLOPS", m.bf16_gflops);
    m.vnni_gops = limit_from_env("STREAMLLM_BENCH_VNNI_GOPS", m.vnni_gops);
    return m;
  }();
  return limits;
}

// The arithmetic unit a weight type's matrix-matrix kernel runs on, as the
// kernel table says for the active ISA: f32, bf16 (vdpbf16ps) or int8 tiles
// (vpdpbusd; vpmaddubsw on AVX2).
enum class ComputeUnit { Fp32, Bf16, Vnni };

inline ComputeUnit compute_unit(streamllm::DType t) {
  using streamllm::kernels::Tiles;
  const Tiles tiles = streamllm::kernels::matmul_kernel(t, streamllm::kernels::active_isa()).tiles;
  return tiles == Tiles::Int8 ? ComputeUnit::Vnni : tiles == Tiles::Bf16 ? ComputeUnit::Bf16 : ComputeUnit::Fp32;
}

// Peak operations per second (1e9) of `threads` threads; they scale linearly.
inline double compute_peak(ComputeUnit u, int threads) {
  const MachineLimits& m = machine_limits();
  const double one = u == ComputeUnit::Fp32 ? m.fp32_gflops : u == ComputeUnit::Bf16 ? m.bf16_gflops : m.vnni_gops;
  return one * threads;
}

// Bytes are read at best at the roof of one thread, or of two (more threads
// share the same two cores): the figure measured in this run (read_roof.hpp),
// once per thread count on first use or again by a ReadRoof row
// (register_read_roof), or STREAMLLM_BENCH_READ_GBS_1T / _2T where set.
inline double& measured_read_roof(int threads) {
  static double gbs[2] = {0, 0};
  return gbs[threads <= 1 ? 0 : 1];
}

inline double read_roof(int threads) {
  const char* name = threads <= 1 ? "STREAMLLM_BENCH_READ_GBS_1T" : "STREAMLLM_BENCH_READ_GBS_2T";
  if (const double set = limit_from_env(name, 0); set > 0) return set;
  double& gbs = measured_read_roof(threads);
  if (gbs == 0) gbs = measure_read_bandwidth(threads <= 1 ? 1 : 2).best_gbs;
  return gbs;
}

// ReadRoof/threads:1 and :2, first in the run: rd's measurement as rows of
// their own (best and mean GB/s of six passes), which the read% of the rows
// after them is taken against.
inline void register_read_roof() {
  benchmark::RegisterBenchmark("ReadRoof", [](benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    ReadBandwidth r;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      r = measure_read_bandwidth(threads);
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    measured_read_roof(threads) = r.best_gbs;
    state.counters["threads"] = threads;
    state.counters["GB/s"] = r.best_gbs;
    state.counters["mean GB/s"] = r.mean_gbs;
  })
      ->ArgName("threads")
      ->Arg(1)
      ->Arg(2)
      ->UseManualTime()
      ->Iterations(1);
}

// `bytes` read over the run: GB/s and that as a percentage of the read roof.
inline void report_read(benchmark::State& state, double bytes, int threads) {
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["read%"] = benchmark::Counter(100 * bytes / 1e9 / read_roof(threads), benchmark::Counter::kIsRate);
}

// `ops` multiply-add operations x 2 over the run: G(FL)OP/s under `name`,
// and that as a percentage of the unit's peak.
inline void report_compute(benchmark::State& state, const char* name, double ops, ComputeUnit unit, int threads) {
  state.counters[name] = benchmark::Counter(ops / 1e9, benchmark::Counter::kIsRate);
  state.counters["peak%"] = benchmark::Counter(100 * ops / 1e9 / compute_peak(unit, threads), benchmark::Counter::kIsRate);
}

inline void set_threads(benchmark::State& state, int arg_index = 0) {
  omp_set_num_threads(static_cast<int>(state.range(arg_index)));
  state.counters["threads"] = static_cast<double>(state.range(arg_index));
}

// The TinyLlama-shaped random-weight model of `type`, one loaded at a time
// (the files are 0.6 to 4.4 GB), every weight page faulted in before anything
// is timed (llama-bench warms up too).
inline streamllm::Llama<streamllm::presets::TinyLlama1B>& tinyllama(const std::string& type) {
  using Tiny = streamllm::presets::TinyLlama1B;
  static std::string loaded;
  static std::unique_ptr<streamllm::Llama<Tiny>> m;
  if (loaded != type) {
    m.reset();
    m = std::make_unique<streamllm::Llama<Tiny>>(
        streamllm::load_llama<Tiny>(random_gguf_model<Tiny>("tinyllama", type), load_mode()));
    loaded = type;
    streamllm::KVCache<Tiny> warm(8);
    const std::vector<streamllm::TokenId> ids{1, 2, 3};
    m->prefill(ids, warm);
    m->decode(4, warm);
  }
  return *m;
}

// STREAMLLM_BENCH_ISA=avx2 or portable: the kernels of a CPU with less than
// this one has (a CPU without AVX-512 measured on one with it, as the tests
// do); anything else, or a path this CPU lacks, is an error.
inline std::optional<streamllm::kernels::Isa> isa_from_env() {
  const char* v = std::getenv("STREAMLLM_BENCH_ISA");
  if (!v || !*v) return std::nullopt;
  using streamllm::kernels::Isa;
  const std::string want = v;
  if (want != "avx2" && want != "portable") throw streamllm::Error("STREAMLLM_BENCH_ISA=" + want + ": expected avx2 or portable");
  return want == "avx2" ? Isa::Avx2 : Isa::Portable;
}

// STREAMLLM_BENCH_DECODE_STREAMS=1 or 4: one token's AVX-512 int8 group
// decode reads a thread's rows as one stream or as four prefetched ones, whichever this
// CPU would take (kernels::decode_one_stream): the two compared on one CPU.
inline std::optional<bool> decode_one_stream_from_env() {
  const char* v = std::getenv("STREAMLLM_BENCH_DECODE_STREAMS");
  if (!v || !*v) return std::nullopt;
  const std::string want = v;
  if (want != "1" && want != "4") throw streamllm::Error("STREAMLLM_BENCH_DECODE_STREAMS=" + want + ": expected 1 or 4");
  return want == "1";
}

// main() of a benchmark binary whose benchmarks are registered at run time.
inline int run_registered(int argc, char** argv, void (*register_all)()) {
  std::optional<streamllm::kernels::ScopedIsa> forced;  // for the whole run
  if (const auto isa = isa_from_env()) forced.emplace(*isa);
  std::optional<streamllm::kernels::ScopedDecodeOneStream> streams;
  if (const auto one = decode_one_stream_from_env()) streams.emplace(*one);
  register_all();
  benchmark::AddCustomContext("streamllm kernels", std::string(streamllm::kernels::to_string(streamllm::kernels::active_isa())) +
                                                       (streamllm::kernels::bf16_tiles() ? ", F16 and BF16 prefill in bf16 tiles"
                                                                                         : ", F16 and BF16 prefill in f32 tiles") +
                                                       (streamllm::kernels::decode_one_stream() ? ", one decode stream a thread"
                                                                                                : ", four decode streams a thread"));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace bench
