// Shared pieces of the benchmarks: model files they write themselves, and
// the counters every benchmark reports.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "streamllm/streamllm.hpp"

namespace bench {

inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("STREAMLLM_DATA_DIR"); env && *env) return env;
  return STREAMLLM_DEFAULT_DATA_DIR;
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
  const auto floats = static_cast<std::size_t>(streamllm::io::llama2c_float_count(s, true));
  const auto bytes = streamllm::io::kLlama2cHeaderBytes + floats * 4;
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
  std::fill_n(w.begin() + static_cast<std::ptrdiff_t>(at), D, 1.0f);      // rms_final
  streamllm::io::write_llama2c(path.string(), s, true, w);
  return path.string();
}

// Multiply-adds per token in the weight matrices (what prefill GFLOP/s and
// decode GB/s are counted from): every linear layer and the classifier.
template <class Config>
constexpr double matmul_params() {
  const double D = Config::Dim, H = Config::HiddenDim, KV = Config::KVDim, L = Config::Layers, V = Config::Vocab;
  return L * (2 * D * D + 2 * KV * D + 3 * H * D) + V * D;
}

inline void set_threads(benchmark::State& state, int arg_index = 0) {
  omp_set_num_threads(static_cast<int>(state.range(arg_index)));
  state.counters["threads"] = static_cast<double>(state.range(arg_index));
}

}  // namespace bench
