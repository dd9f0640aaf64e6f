// Kernel micro-benchmarks against this machine's limits: matrix-vector per
// weight type (GB/s of weights read; a matrix far larger than the caches, and
// one that stays in L2 to show the kernel's own speed) and the tiled
// matrix-matrix product per type (GFLOP/s, 512 tokens); attention of a
// chat turn's new rows against a long history.
#include <map>
#include <random>
#include <tuple>

#include "bench_support.hpp"
#include "streamllm/kernels/matmul/matmul.hpp"
#include "streamllm/kernels/ops/attention.hpp"

namespace {

using namespace streamllm;

struct Matrix {
  AlignedVector<std::byte> bytes;
  TensorView view;
};

// A rows x cols matrix of random weights (std 0.02) in a type, built once.
const Matrix& matrix(DType t, std::int64_t rows, std::int64_t cols) {
  static std::map<std::tuple<int, std::int64_t, std::int64_t>, Matrix> cache;
  auto key = std::make_tuple(static_cast<int>(t), rows, cols);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  Matrix m;
  m.bytes.resize(static_cast<std::size_t>(row_bytes(t, cols) * rows));
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    bench::fill_normal(row.data(), row.size(), 0.02f, static_cast<std::uint64_t>(r + 1));
    quant::quantize_row(t, row.data(), cols, m.bytes.data() + r * row_bytes(t, cols));
  }
  m.view = TensorView::dense(t, m.bytes.data(), rows, cols);
  return cache.emplace(key, std::move(m)).first->second;
}

int threads(const benchmark::State& state) { return static_cast<int>(state.range(0)); }

// Q8_0x16 and Q4_0x16: the layout a model reads on the AVX-512 path (it
// interleaves Q8_0 and Q4_0 at load); Q8_0 and Q4_0 as in the file.
const DType kTypes[] = {DType::F32,     DType::F16,     DType::BF16, DType::Q8_0, DType::Q4_0,   DType::Q4_K,
                        DType::Q5_K,    DType::Q6_K,    DType::Q3_K, DType::Q2_K, DType::IQ4_XS, DType::IQ4_NL,
                        DType::Q8_0x16, DType::Q4_0x16};

// args: threads, rows (cols = 2048)
void gemv(benchmark::State& state, DType t) {
  bench::set_threads(state);
  const Matrix& m = matrix(t, state.range(1), 2048);
  // Aligned as the model's activations are (a std::vector's 16-byte
  // alignment splits every vector load of x across two lines).
  AlignedVector<float> x(2048, 0.5f), y(static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    kernels::matmul(m.view, x.data(), 1, 2048, y.data(), y.size());
    benchmark::ClobberMemory();
  }
  bench::report_read(state, static_cast<double>(m.view.bytes()) * static_cast<double>(state.iterations()), threads(state));
}

// args: threads (5632 x 2048 weights, 512 tokens)
void gemm(benchmark::State& state, DType t) {
  bench::set_threads(state);
  constexpr std::size_t n = 512, k = 2048;
  const Matrix& m = matrix(t, 5632, static_cast<std::int64_t>(k));
  AlignedVector<float> x(n * k), y(n * 5632);
  bench::fill_normal(x.data(), x.size(), 1.0f, 7);
  for (auto _ : state) {
    kernels::matmul(m.view, x.data(), n, k, y.data(), 5632);
    benchmark::ClobberMemory();
  }
  bench::report_compute(state, "GFLOP/s", 2.0 * n * k * 5632 * static_cast<double>(state.iterations()), bench::compute_unit(t),
                        threads(state));
}

// args: threads, rows (cols = 2048), tokens: the matrix-vector kernels at the
// few tokens of batched decode (each weight read once for all of them);
// GOP/s against the int8 VNNI (or bf16) peak, GB/s against the read roof.
void gemv_tokens(benchmark::State& state, DType t) {
  bench::set_threads(state);
  const auto rows = static_cast<std::size_t>(state.range(1)), n = static_cast<std::size_t>(state.range(2));
  const Matrix& m = matrix(t, static_cast<std::int64_t>(rows), 2048);
  AlignedVector<float> x(n * 2048), y(n * rows);
  bench::fill_normal(x.data(), x.size(), 1.0f, 3);
  for (auto _ : state) {
    kernels::matmul(m.view, x.data(), n, 2048, y.data(), rows);
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  bench::report_read(state, static_cast<double>(m.view.bytes()) * iters, threads(state));
  // The decode kernel of float activations runs on the FMA units; past its
  // tokens, and for the int8 ones, the unit is the matrix-matrix kernel's.
  const kernels::MatmulKernel& row = kernels::matmul_kernel(t, kernels::active_isa());
  const bool widened = n <= row.decode_tokens && row.activations == kernels::ActivationLayout::Float;
  bench::report_compute(state, "GOP/s", 2.0 * static_cast<double>(rows * n) * 2048 * iters,
                        widened ? bench::ComputeUnit::Fp32 : bench::compute_unit(t), threads(state));
}

// args: threads, rows, context. One layer's attention with TinyLlama's heads
// (32 of 64 dims, 4 kv heads): `rows` new tokens after `context` cached ones,
// in blocks of kernels::AttentionBlock::kMaxRows as the model plans them. A chat
// turn of 38 tokens after 1000 spends a quarter of its prefill here.
void attention(benchmark::State& state) {
  constexpr int kHeadDim = 64, kHeads = 32, kKvHeads = 4;
  constexpr std::size_t kQd = kHeadDim * kHeads, kKv = kHeadDim * kKvHeads;
  bench::set_threads(state);
  const auto rows = static_cast<std::int64_t>(state.range(1)), context = static_cast<std::int64_t>(state.range(2));
  const auto keys = static_cast<std::size_t>(context + rows);
  AlignedVector<float> q(static_cast<std::size_t>(rows) * kQd), out(q.size()), k(keys * kKv), v(keys * kKv);
  bench::fill_normal(q.data(), q.size(), 1.0f, 11);
  bench::fill_normal(k.data(), k.size(), 1.0f, 12);
  bench::fill_normal(v.data(), v.size(), 1.0f, 13);
  std::vector<kernels::AttentionBlock> blocks;
  for (std::int64_t r0 = 0; r0 < rows; r0 += kernels::AttentionBlock::kMaxRows) {
    kernels::AttentionBlock b;
    b.q = b.q_sink = q.data() + static_cast<std::size_t>(r0) * kQd;
    b.out = out.data() + static_cast<std::size_t>(r0) * kQd;
    b.ld = kQd;
    b.first_pos = context + r0;
    b.rows = static_cast<int>(std::min<std::int64_t>(kernels::AttentionBlock::kMaxRows, rows - r0));
    b.segments[0] = KVSegment::f32(k.data(), v.data(), kKv, context + r0 + b.rows, false, 0);
    b.n_segments = 1;
    blocks.push_back(b);
  }
  for (auto _ : state) {
    kernels::attend<kHeadDim, kHeads, kKvHeads>(blocks.data(), blocks.size());
    benchmark::ClobberMemory();
  }
  // Scores and weighted values: 2 x 2 x head_dim flops per visible key and query head.
  double pairs = 0;
  for (std::int64_t r = 0; r < rows; ++r) pairs += static_cast<double>(context + r + 1);
  bench::report_compute(state, "GFLOP/s", 4.0 * kHeadDim * kHeads * pairs * static_cast<double>(state.iterations()),
                        bench::ComputeUnit::Fp32, threads(state));
}

void register_all() {
  benchmark::RegisterBenchmark("Attention", attention)
      ->ArgsProduct({{1, 2}, {1, 6, 16, 38, 512}, {1024}})
      ->ArgNames({"threads", "rows", "context"})
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  for (DType t : kTypes) {
    const std::string name(dtype_name(t));
    benchmark::RegisterBenchmark(("Gemv/" + name).c_str(), [t](benchmark::State& s) { gemv(s, t); })
        ->ArgsProduct({{1, 2}, {65536, 5632, 2048, 128}})
        ->ArgNames({"threads", "rows"})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    if (!is_kquant(t))
      benchmark::RegisterBenchmark(("GemvTokens/" + name).c_str(), [t](benchmark::State& s) { gemv_tokens(s, t); })
          ->ArgsProduct({{1, 2}, {65536, 5632, 256}, {1, 2, 4, 8, 16, 24, 28, 32, 38}})
          ->ArgNames({"threads", "rows", "tokens"})
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("Gemm512/" + name).c_str(), [t](benchmark::State& s) { gemm(s, t); })
        ->ArgsProduct({{1, 2}})
        ->ArgNames({"threads"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) { return bench::run_registered(argc, argv, register_all); }
