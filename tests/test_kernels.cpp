// Every vector kernel against its scalar twin, on sizes that leave tails.
#include <cmath>
#include <random>
#include <vector>

#include "common.hpp"
#include "streamllm/attention.hpp"
#include "streamllm/kernels/axpy.hpp"
#include "streamllm/kernels/dot.hpp"
#include "streamllm/kernels/matmul.hpp"
#include "streamllm/kernels/rmsnorm.hpp"
#include "streamllm/kernels/rope.hpp"
#include "streamllm/kernels/silu_gate.hpp"
#include "streamllm/kernels/softmax.hpp"

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

TEST_CASE("dot equals its scalar twin on odd sizes", "[kernels]") {
  for (std::size_t n : kOddSizes) {
    const auto a = random_vector(n, 1), b = random_vector(n, 2);
    INFO("n = " << n);
    REQUIRE(k::dot(a.data(), b.data(), n) ==
            Approx(k::scalar::dot(a.data(), b.data(), n)).epsilon(1e-5).margin(1e-5));
  }
}

TEST_CASE("rmsnorm equals its scalar twin on odd sizes", "[kernels]") {
  for (std::size_t n : kOddSizes) {
    const auto x = random_vector(n, 3), w = random_vector(n, 4);
    std::vector<float> got(n), want(n);
    k::rmsnorm(got.data(), x.data(), w.data(), n, 1e-5f);
    k::scalar::rmsnorm(want.data(), x.data(), w.data(), n, 1e-5f);
    INFO("n = " << n);
    require_close(got, want, 1e-5f);
  }
}

TEST_CASE("softmax equals its scalar twin and sums to one", "[kernels]") {
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

TEST_CASE("silu gate equals its scalar twin on odd sizes", "[kernels]") {
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

TEST_CASE("axpy and scale equal their scalar twins on odd sizes", "[kernels]") {
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

TEST_CASE("RoPE tables rotate as the textbook formula does, at any position", "[kernels][rope]") {
  for (int head_dim : {2, 6, 8, 64, 128}) {
    const k::Rope rope(head_dim, 10000.0);
    std::vector<float> cosx(static_cast<std::size_t>(rope.table_len())), sinx(cosx.size());
    for (std::int64_t pos : {std::int64_t(0), std::int64_t(1), std::int64_t(37), std::int64_t(511),
                             std::int64_t(123457), std::int64_t(9999991)}) {
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

TEST_CASE("matmul equals Eigen's product for f32 weights, any token count", "[kernels][matmul]") {
  // m and k odd so that row tiles and vector tails are partial; n covers the
  // matrix-vector path (1..4) and the tiled path, with partial token groups.
  for (std::size_t m : {1, 5, 13, 67, 200}) {
    for (std::size_t kk : {1, 7, 33, 300}) {
      const auto w = random_vector(m * kk, 11);
      for (std::size_t n : {1, 2, 3, 4, 5, 9, 31, 33, 70}) {
        const std::size_t ldx = kk + 3, ldy = m + 2;  // strides wider than the rows
        const auto x = random_vector(n * ldx, 12);
        std::vector<float> got(n * ldy, -7.0f), want(n * ldy, -7.0f);
        k::matmul_f32(w.data(), m, kk, x.data(), ldx, n, got.data(), ldy);
        k::scalar::matmul_f32(w.data(), m, kk, x.data(), ldx, n, want.data(), ldy);
        INFO("m " << m << " k " << kk << " n " << n);
        require_close(got, want, 1e-4f * std::sqrt(static_cast<float>(kk)));
      }
    }
  }
}

TEST_CASE("online-softmax attention equals the textbook form, across blocks and segments", "[kernels][attention]") {
  constexpr int HD = 8, Heads = 4, KVHeads = 2;
  using Att = streamllm::Attention<HD, Heads, KVHeads>;
  for (std::int64_t count : {1, 5, 64, 65, 200}) {
    const std::size_t stride = KVHeads * HD;
    const auto keys = random_vector(static_cast<std::size_t>(count) * stride, 13, 2.0f);
    const auto vals = random_vector(static_cast<std::size_t>(count) * stride, 14);
    const auto q = random_vector(Heads * HD, 15, 2.0f);
    // The same keys as one segment, and cut into three.
    streamllm::AttentionRow one, three;
    std::vector<float> out1(Heads * HD), out3(Heads * HD), want(Heads * HD);
    one.q = one.q_sink = three.q = three.q_sink = q.data();
    one.out = out1.data();
    three.out = out3.data();
    one.segments[0] = {keys.data(), vals.data(), stride, count, false};
    one.n_segments = 1;
    const std::int64_t a = count / 3, b = count / 2;
    three.segments[0] = {keys.data(), vals.data(), stride, a, false};
    three.segments[1] = {keys.data() + a * stride, vals.data() + a * stride, stride, b - a, false};
    three.segments[2] = {keys.data() + b * stride, vals.data() + b * stride, stride, count - b, false};
    three.n_segments = 3;
    Att::run(&one, 1);
    Att::run(&three, 1);
    for (int h = 0; h < Heads; ++h) {
      const int kvh = h / (Heads / KVHeads);
      streamllm::reference::attend_head(q.data() + h * HD, keys.data() + kvh * HD, vals.data() + kvh * HD,
                                        stride, count, HD, want.data() + h * HD);
    }
    INFO("keys " << count);
    require_close(out1, want, 1e-5f);
    require_close(out3, want, 1e-5f);
  }
}
