// Every vector kernel against its scalar twin, on sizes that leave tails.
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "common.hpp"
#include "streamllm/kernels/matmul/matmul.hpp"
#include "streamllm/kernels/ops/attention.hpp"
#include "streamllm/kernels/ops/axpy.hpp"
#include "streamllm/kernels/ops/dot.hpp"
#include "streamllm/kernels/ops/rmsnorm.hpp"
#include "streamllm/kernels/ops/rope.hpp"
#include "streamllm/kernels/ops/silu_gate.hpp"
#include "streamllm/kernels/ops/softmax.hpp"

namespace k = streamllm::kernels;

namespace {

std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Relative to the size of the values compared, with an absolute floor.
void require_close(const std::vector<float>& got, const std::vector<float>& want, float rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i << " got " << got[i] << " want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= rel * std::max(1.0f, std::abs(want[i])));
  }
}

const std::size_t kOddSizes[] = {1, 3, 7, 8, 15, 17, 31, 33, 64, 67, 100, 257, 1000};

}  // namespace

// Each op of each kernel family (runtime/cpu_features.hpp) against its scalar twin.
TEMPLATE_TEST_CASE("dot equals its scalar twin on odd sizes", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (std::size_t n : kOddSizes) {
    const auto a = random_vector(n, 1), b = random_vector(n, 2);
    INFO("n = " << n);
    REQUIRE(k::dot(a.data(), b.data(), n) == Approx(k::scalar::dot(a.data(), b.data(), n)).epsilon(1e-5).margin(1e-5));
  }
}

TEMPLATE_TEST_CASE("sum_each gives, in lane i, the sum of row i", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  const auto rows = random_vector(k::kMaxLanes * k::kMaxLanes, 41);
  float out[k::kMaxLanes];
  const std::size_t lanes = k::lane_sums(rows.data(), out);
  REQUIRE(lanes <= k::kMaxLanes);
  for (std::size_t i = 0; i < lanes; ++i) {
    double want = 0;
    for (std::size_t j = 0; j < lanes; ++j) want += rows[i * lanes + j];
    INFO("lane " << i);
    REQUIRE(out[i] == Approx(want).epsilon(1e-5).margin(1e-5));
  }
}

TEMPLATE_TEST_CASE("rmsnorm equals its scalar twin on odd sizes", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (std::size_t n : kOddSizes) {
    const auto x = random_vector(n, 3), w = random_vector(n, 4);
    std::vector<float> got(n), want(n);
    k::rmsnorm(got.data(), x.data(), w.data(), n, 1e-5f);
    k::scalar::rmsnorm(want.data(), x.data(), w.data(), n, 1e-5f);
    INFO("n = " << n);
    require_close(got, want, 1e-5f);
  }
}

TEMPLATE_TEST_CASE("softmax equals its scalar twin and sums to one", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (std::size_t n : kOddSizes) {
    auto got = random_vector(n, 5, 4.0f);
    auto want = got;
    k::softmax(got.data(), n);
    k::scalar::softmax(want.data(), n);
    INFO("n = " << n);
    require_close(got, want, 1e-5f);
    double sum = 0;
    for (float p : got) sum += p;
    REQUIRE(sum == Approx(1.0).epsilon(1e-5));
  }
}

TEMPLATE_TEST_CASE("silu gate equals its scalar twin on odd sizes", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (std::size_t n : kOddSizes) {
    auto got = random_vector(n, 6, 3.0f);
    auto want = got;
    const auto up = random_vector(n, 7);
    k::silu_gate(got.data(), up.data(), n);
    k::scalar::silu_gate(want.data(), up.data(), n);
    INFO("n = " << n);
    require_close(got, want, 1e-5f);
  }
}

TEMPLATE_TEST_CASE("axpy and scale equal their scalar twins on odd sizes", "[kernels]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (std::size_t n : kOddSizes) {
    const auto x = random_vector(n, 8);
    auto got = random_vector(n, 9), want = got;
    k::axpy(0.37f, x.data(), got.data(), n);
    k::scalar::axpy(0.37f, x.data(), want.data(), n);
    require_close(got, want, 1e-6f);
    k::scale(-1.7f, got.data(), n);
    k::scalar::scale(-1.7f, want.data(), n);
    require_close(got, want, 1e-6f);
  }
}

TEST_CASE("parallel_chunks hands every chunk to one thread once, a stalled thread's run to the others", "[kernels]") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(2, saved));
  for (const std::size_t total : {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(1001)})
    for (const std::size_t chunk : {std::size_t(1), std::size_t(3), std::size_t(16)}) {
      const std::size_t chunks = (total + chunk - 1) / chunk;
      std::vector<std::atomic<int>> seen(total);
      std::vector<int> owner(chunks, -1);
      std::atomic<std::size_t> done{0};
      bool stalled = false, waited_out = false;
      // Thread 0 stalls in chunk 0 until every other chunk is done: only if
      // the others take what is left of its run can that happen.
      k::parallel_chunks(total, chunk, k::kMinParallelWork, [&](std::size_t b, std::size_t e) {
        const int me = k::team_thread();
        owner[b / chunk] = me;
        for (std::size_t i = b; i < e; ++i) seen[i]++;
        if (me == 0 && b == 0) {
          stalled = true;
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (done.load() + 1 < chunks && !(waited_out = std::chrono::steady_clock::now() > deadline))
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (e != std::min(total, b + chunk)) seen[b] = -1000;  // a wrong chunk end
        done++;
      });
      INFO("total " << total << " chunk " << chunk);
      for (std::size_t i = 0; i < total; ++i) REQUIRE(seen[i] == 1);
      REQUIRE(!waited_out);
      if (stalled)
        for (std::size_t c = 1; c < chunks; ++c) REQUIRE(owner[c] != 0);
    }
  omp_set_num_threads(saved);
}

TEST_CASE("parallel_chunks passes a chunk's exception to its caller, from any thread, and runs on after it", "[kernels]") {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(2, saved));
  for (int thrower = 0; thrower < 2; ++thrower) {
    // The worker throws from its first chunk; the caller's first chunk
    // waits until it has, so that the worker is sure to take one.
    std::atomic<bool> worker_threw{false};
    try {
      k::parallel_chunks(64, 1, k::kMinParallelWork, [&](std::size_t, std::size_t) {
        const int me = k::team_thread();
        if (me == thrower) {
          if (me == 1) worker_threw = true;
          throw streamllm::Error("thread " + std::to_string(thrower));
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (me == 0 && thrower == 1 && !worker_threw && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      FAIL("no exception");
    } catch (const streamllm::Error& e) {
      CHECK(std::string(e.what()) == "thread " + std::to_string(thrower));
    }
    if (thrower == 1) CHECK(worker_threw);
  }
  std::vector<std::atomic<int>> seen(1000);
  k::parallel_chunks(seen.size(), 7, k::kMinParallelWork, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) seen[i]++;
  });
  for (const auto& s : seen) REQUIRE(s == 1);
  omp_set_num_threads(saved);
}

TEST_CASE("RoPE scaled as a file says: frequency factors, linear positions, rotary dimensions", "[kernels][rope]") {
  // The textbook angle with each scaling written out: pair i of a head turns by
  // pos * scale * theta^(-2i / rotary) / factor_i while 2i < rotary, else not at all.
  const int head_dim = 16;
  const double theta = 500000.0;
  const std::vector<double> factors{1, 1, 1.5, 2, 4, 8, 8, 8};
  for (const auto& [scale, rotary] : {std::pair{1.0, 0}, std::pair{0.25, 0}, std::pair{1.0, 10}, std::pair{0.5, 12}}) {
    const k::Rope rope(head_dim, theta, k::RopeScaling{factors, scale, rotary});
    std::vector<float> cosx(static_cast<std::size_t>(rope.table_len())), sinx(cosx.size());
    for (std::int64_t pos : {std::int64_t(0), std::int64_t(3), std::int64_t(700), std::int64_t(131071)}) {
      auto got = random_vector(static_cast<std::size_t>(head_dim) * 3, 11), want = got;
      rope.table(pos, cosx.data(), sinx.data());
      k::rope_apply(got.data(), got.size(), cosx.data(), sinx.data(), cosx.size());
      const int dims = rotary > 0 ? rotary : head_dim;
      for (std::size_t e = 0; e + 1 < want.size(); e += 2) {
        const std::size_t i = (e % head_dim) / 2;
        if (2 * static_cast<int>(i) >= dims) continue;
        const double a = static_cast<double>(pos) * scale * std::pow(theta, -2.0 * static_cast<double>(i) / dims) / factors[i];
        const double x0 = want[e], x1 = want[e + 1];
        want[e] = static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a));
        want[e + 1] = static_cast<float>(x0 * std::sin(a) + x1 * std::cos(a));
      }
      INFO("scale " << scale << " rotary " << rotary << " pos " << pos);
      require_close(got, want, 2e-6f);
    }
  }
}

TEMPLATE_TEST_CASE("RoPE tables rotate as the textbook formula does, at any position", "[kernels][rope]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  for (int head_dim : {2, 6, 8, 64, 128}) {
    const k::Rope rope(head_dim, 10000.0);
    std::vector<float> cosx(static_cast<std::size_t>(rope.table_len())), sinx(cosx.size());
    for (std::int64_t pos :
         {std::int64_t(0), std::int64_t(1), std::int64_t(37), std::int64_t(511), std::int64_t(123457), std::int64_t(9999991)}) {
      const std::size_t n = static_cast<std::size_t>(head_dim) * 5;  // five heads
      auto got = random_vector(n, 10), want = got, twin = got;
      rope.table(pos, cosx.data(), sinx.data());
      k::rope_apply(got.data(), n, cosx.data(), sinx.data(), cosx.size());
      k::scalar::rope_apply(twin.data(), n, cosx.data(), sinx.data(), cosx.size());
      k::scalar::rope_rotate(want.data(), n, head_dim, pos, 10000.0);
      INFO("head_dim " << head_dim << " pos " << pos);
      require_close(got, twin, 1e-6f);
      require_close(got, want, 2e-6f);
    }
  }
}

TEMPLATE_TEST_CASE("matmul equals Eigen's product for f32 weights, any token count", "[kernels][matmul]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  // m and k odd so that row tiles and vector tails are partial; n covers the
  // matrix-vector path (1..4, and 1..16 through the AVX-512 kernels: four
  // streams up to 4 tokens, two up to 8, passes of 8 past that) and the tiled
  // path, with partial token groups and (kTokensPerPass + 44) a second,
  // partial pass of tokens; 200 rows make several row blocks and 1100
  // columns three k slices, the last partial.
  for (std::size_t m : {1, 5, 13, 67, 200}) {
    for (std::size_t kk : {1, 7, 33, 300, 1100}) {
      const auto w = random_vector(m * kk, 11);
      const std::size_t counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 70, k::kTokensPerPass + 44};
      for (std::size_t n : counts) {
        const std::size_t ldx = kk + 3, ldy = m + 2;  // strides wider than the rows
        const auto x = random_vector(n * ldx, 12);
        std::vector<float> want(n * ldy, -7.0f);
        k::scalar::matmul_f32(w.data(), m, kk, x.data(), ldx, n, want.data(), ldy);
        INFO("m " << m << " k " << kk << " n " << n);
        // The family's rows (AVX-512 CPUs pack and unpack the f32 tiles with
        // register transposes).
        const auto view = streamllm::TensorView::dense(streamllm::DType::F32, w.data(), static_cast<std::int64_t>(m),
                                                       static_cast<std::int64_t>(kk));
        std::vector<float> got(n * ldy, -7.0f);
        k::matmul(view, x.data(), n, ldx, got.data(), ldy);
        require_close(got, want, 1e-4f * std::sqrt(static_cast<float>(kk)));
      }
    }
  }
}

namespace {
// Attention of one query over the keys visible at text position t, in
// double: sink keys (p < S) scored with q_sink, the others with q.
template <int HD>
std::vector<float> attend_reference(const float* q, const float* q_sink, const std::vector<float>& K, const std::vector<float>& V,
                                    std::size_t stride, std::int64_t n_keys, std::int64_t t, std::int64_t S, std::int64_t W) {
  std::vector<double> s;
  std::vector<std::int64_t> keys;
  for (std::int64_t p = 0; p < n_keys; ++p)
    if (p <= t && (p < S || p > t - W)) keys.push_back(p);
  double mx = -1e300;
  for (auto p : keys) {
    const float* qq = p < S ? q_sink : q;
    double d = 0;
    for (int i = 0; i < HD; ++i) d += double(qq[i]) * K[static_cast<std::size_t>(p) * stride + static_cast<std::size_t>(i)];
    s.push_back(d / std::sqrt(double(HD)));
    mx = std::max(mx, s.back());
  }
  double sum = 0;
  for (auto& x : s) sum += (x = std::exp(x - mx));
  std::vector<float> out(HD);
  for (int i = 0; i < HD; ++i) {
    double o = 0;
    for (std::size_t j = 0; j < keys.size(); ++j)
      o += s[j] * V[static_cast<std::size_t>(keys[j]) * stride + static_cast<std::size_t>(i)];
    out[static_cast<std::size_t>(i)] = static_cast<float>(o / sum);
  }
  return out;
}

// ramp: key p scaled by 1 + ramp p, so that later blocks' scores pass the
// running maximum by far more than the kernel's margin (kMaxMargin), again
// and again, into the hundreds.
//
// types: the keys and values are read from rows of those types (a KV
// cache's, quant/kv_types.hpp); the reference reads what the scalar
// kv_decode gives for them, its twin.
template <int HD, int Heads = 4, int KVHeads = 2>
void check_tiled_attention(float ramp = 0, streamllm::KVTypes types = {}) {
  constexpr int G = Heads / KVHeads;

  constexpr std::size_t stride = KVHeads * HD, qld = Heads * HD;
  const std::int64_t n_keys = 100;
  auto K = random_vector(static_cast<std::size_t>(n_keys) * stride, 13, 2.0f);
  for (std::size_t i = 0; i < K.size(); ++i) K[i] *= 1.0f + ramp * static_cast<float>(i / stride);
  auto V = random_vector(static_cast<std::size_t>(n_keys) * stride, 14);
  const std::size_t k_row = streamllm::kv_row_bytes(types.k, stride), v_row = streamllm::kv_row_bytes(types.v, stride);
  std::vector<std::byte> K_rows(static_cast<std::size_t>(n_keys) * k_row), V_rows(static_cast<std::size_t>(n_keys) * v_row);
  for (std::size_t p = 0; p < static_cast<std::size_t>(n_keys); ++p) {
    streamllm::kv_encode_row(types.k, K.data() + p * stride, stride, K_rows.data() + p * k_row);
    streamllm::kv_encode_row(types.v, V.data() + p * stride, stride, V_rows.data() + p * v_row);
    streamllm::kv_decode(types.k, K_rows.data() + p * k_row, 0, stride, K.data() + p * stride);
    streamllm::kv_decode(types.v, V_rows.data() + p * v_row, 0, stride, V.data() + p * stride);
  }
  struct Rule {
    std::int64_t S, W;
  };
  for (const Rule rule : {Rule{0, streamllm::kUnboundedWindow}, Rule{2, 20}, Rule{0, 7}}) {
    for (int rows : {1, 5, 16}) {
      const std::int64_t first = n_keys - rows;
      const auto q = random_vector(static_cast<std::size_t>(rows) * qld, 15, 2.0f);
      const auto q_sink = random_vector(static_cast<std::size_t>(rows) * qld, 16, 2.0f);
      std::vector<float> out(static_cast<std::size_t>(rows) * qld);
      k::AttentionBlock b;
      b.q = q.data();
      b.q_sink = q_sink.data();
      b.out = out.data();
      b.ld = qld;
      b.first_pos = first;
      b.rows = rows;
      b.sinks = rule.S;
      b.window = rule.W;
      // The keys in uneven segments, sinks apart.
      std::int64_t cuts[] = {0, rule.S, 31, 64, n_keys};
      for (int c = 0; c + 1 < 5; ++c) {
        const std::int64_t p0 = std::max(cuts[c], c > 0 ? rule.S : std::int64_t(0)), p1 = cuts[c + 1];
        if (c == 0 && rule.S > 0) {
          b.segments[b.n_segments++] = {K_rows.data(), V_rows.data(), k_row, v_row, types, rule.S, true, 0};
          continue;
        }
        if (p1 <= p0) continue;
        const auto at = static_cast<std::size_t>(p0);
        b.segments[b.n_segments++] = {
            K_rows.data() + at * k_row, V_rows.data() + at * v_row, k_row, v_row, types, p1 - p0, false, p0};
      }
      k::attend<HD, Heads, KVHeads>(&b, 1);
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < Heads; ++h) {
          const int kvh = h / G;
          const std::size_t at = static_cast<std::size_t>(r) * qld + static_cast<std::size_t>(h * HD);
          std::vector<float> Kh(K.size()), Vh(V.size());
          const auto want =
              attend_reference<HD>(q.data() + at, q_sink.data() + at, std::vector<float>(K.begin() + kvh * HD, K.end()),
                                   std::vector<float>(V.begin() + kvh * HD, V.end()), stride, n_keys, first + r, rule.S, rule.W);
          const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(at),
                                       out.begin() + static_cast<std::ptrdiff_t>(at) + HD);
          INFO("head_dim " << HD << " rows " << rows << " row " << r << " head " << h << " sinks " << rule.S << " window "
                           << rule.W << " ramp " << ramp << " types " << streamllm::kv_types_name(types));
          // Scores in float lose more as they grow: the tolerance grows with the keys.
          require_close(got, want, 1e-5f * (1.0f + ramp * static_cast<float>(n_keys)));
        }
    }
  }
}
}  // namespace

TEMPLATE_TEST_CASE("attention reads every KV cache type as its scalar twin does", "[kernels][attention][kv_types]",
                   TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  using streamllm::KVType;
  // Every pair of key and value types on two shapes; each type for both on the others.
  for (const KVType kt : streamllm::kKVTypes)
    for (const KVType vt : streamllm::kKVTypes) {
      const streamllm::KVTypes types{kt, vt};
      check_tiled_attention<16>(0, types);             // a row of one block of 32: two heads
      check_tiled_attention<128, 4, 4>(0.02f, types);  // Llama 2's heads, no grouping; scores far past the margin
      if (kt != vt) continue;
      check_tiled_attention<64>(0, types);        // heads of two blocks; two queries per key (head tiles)
      check_tiled_attention<48, 2, 2>(0, types);  // the second head starts inside a block
      check_tiled_attention<8, 8, 4>(0, types);   // stories260K's: four heads in a block, no vector per head
    }
}

TEMPLATE_TEST_CASE("tiled attention equals the textbook form, across key blocks, segments, rows, sinks and windows",
                   "[kernels][attention]", TEST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  const k::ScopedIsa family(TestType::isa);
  check_tiled_attention<16>();  // whole vectors of head dimension (AVX-512: the vector score path)
  check_tiled_attention<8>();   // fewer than a vector: scalar scores, or keys along the lanes for 16+ queries
  check_tiled_attention<12>();  // not a whole number of vectors on any path
  check_tiled_attention<6>();   // not a multiple of 4: never along the lanes
  check_tiled_attention<64>();
  // Heads of a row taken together against each key block (Attention::kHeadTile):
  // 2 above; here 4 on AVX-512 and 2 on AVX2 (8 of them: two or four tiles),
  // and 3, which takes them one by one.
#ifdef STREAMLLM_HAVE_X86_KERNELS
  static_assert(k::avx512::Attention<64, 16, 2>::kHeadTile == 4 && k::avx2::Attention<64, 16, 2>::kHeadTile == 2);
#endif
  check_tiled_attention<64, 16, 2>();
  check_tiled_attention<16, 6, 2>();
  // Scores climbing block after block (to ~25x): the maximum moves often, far.
  check_tiled_attention<64, 16, 2>(0.25f);
  check_tiled_attention<16>(0.25f);
  check_tiled_attention<8>(0.25f);
}
