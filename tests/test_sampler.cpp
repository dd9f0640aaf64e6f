// Sampling: seeded reproducibility, and each filter doing what it says.
#include <limits>
#include <random>

#include "common.hpp"

using namespace streamllm;

namespace {
std::vector<float> random_logits(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}
}  // namespace

TEST_CASE("the same seed gives the same tokens, another seed others", "[sampler]") {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.seed = 1234;
  Sampler a(p), b(p);
  p.seed = 99;
  Sampler c(p);
  std::vector<TokenId> ta, tb, tc;
  for (std::uint32_t i = 0; i < 200; ++i) {
    const auto l = random_logits(512, i);
    ta.push_back(a.sample(l));
    tb.push_back(b.sample(l));
    tc.push_back(c.sample(l));
  }
  REQUIRE(ta == tb);
  REQUIRE(ta != tc);
}

TEST_CASE("top-k 1 equals greedy at any temperature", "[sampler]") {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  p.seed = 7;
  Sampler s(p);
  for (std::uint32_t i = 0; i < 100; ++i) {
    const auto l = random_logits(32000, i);
    REQUIRE(s.sample(l) == argmax(l));
  }
  Sampler greedy;  // temperature 0
  const auto l = random_logits(512, 5);
  REQUIRE(greedy.sample(l) == argmax(l));
}

TEST_CASE("top-p keeps the smallest most-likely set whose mass reaches p", "[sampler]") {
  for (float top_p : {0.1f, 0.5f, 0.9f, 0.99f}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    Sampler s(p);
    const auto l = random_logits(1000, 3);
    // Full softmax, for the mass the kept tokens carry.
    std::vector<double> prob(l.size());
    double sum = 0;
    const float mx = *std::max_element(l.begin(), l.end());
    for (std::size_t i = 0; i < l.size(); ++i) sum += prob[i] = std::exp(double(l[i]) - mx);
    const auto& kept = s.candidates(l);
    double mass = 0, renorm = 0;
    for (const auto& c : kept) {
      mass += prob[static_cast<std::size_t>(c.id)] / sum;
      renorm += c.p;
    }
    const double last = prob[static_cast<std::size_t>(kept.back().id)] / sum;
    INFO("top_p " << top_p << " kept " << kept.size());
    REQUIRE(mass >= top_p - 1e-6);
    REQUIRE(mass - last < top_p);  // one token fewer would not reach p
    REQUIRE(renorm == Approx(1.0).epsilon(1e-5));
    for (std::size_t i = 1; i < kept.size(); ++i) REQUIRE(kept[i - 1].p >= kept[i].p);
  }
}

TEST_CASE("sampling frequencies follow the tempered distribution", "[sampler]") {
  const std::vector<float> l{2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.seed = 11;
  Sampler s(p);
  std::vector<int> hits(4);
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++hits[static_cast<std::size_t>(s.sample(l))];
  double z = 0;
  for (float x : l) z += std::exp(x / 0.5);
  for (std::size_t i = 0; i < 4; ++i) {
    const double want = std::exp(l[i] / 0.5) / z;
    INFO("token " << i);
    REQUIRE(hits[i] / double(n) == Approx(want).margin(0.01));
  }
}

TEST_CASE("the repetition penalty pushes recent tokens down", "[sampler]") {
  std::vector<float> l{3.0f, 2.9f, -1.0f, -1.1f};
  SamplingParams p;
  p.repetition_penalty = 1.3f;
  Sampler s(p);  // greedy with a penalty
  const std::vector<TokenId> history{0};
  REQUIRE(s.sample(l, history) == 1);  // 3.0 / 1.3 < 2.9
  REQUIRE(s.sample(l) == 0);
  const std::vector<TokenId> neg{2};
  l = {-5.0f, -5.0f, -1.0f, -1.1f};
  REQUIRE(s.sample(l, neg) == 3);  // -1.0 * 1.3 < -1.1
}

TEST_CASE("sampling parameters out of their domain are rejected", "[sampler][errors]") {
  SamplingParams p;
  p.top_p = 0.0f;
  REQUIRE_THROWS_AS(Sampler(p), InputError);
  p = {};
  p.temperature = -1.0f;
  REQUIRE_THROWS_WITH(Sampler(p), Catch::Contains("temperature"));
  p = {};
  p.top_k = -2;
  REQUIRE_THROWS_AS(Sampler(p), InputError);
}

TEST_CASE("NaN or +Inf logits are an error naming the token, and -Inf is a masked token", "[sampler][errors]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 2;
    Sampler s(p);
    INFO("temperature " << temperature);
    std::vector<float> l = {1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN(), 0.2f};
    REQUIRE_THROWS_WITH(s.sample(l), Catch::Contains("the logit of token 2 is NaN"));
    REQUIRE_THROWS_AS(s.candidates(l), InputError);
    l[2] = inf;
    REQUIRE_THROWS_WITH(s.sample(l), Catch::Contains("the logit of token 2 is +Inf"));
    l = {-inf, 0.5f, -inf, -inf};
    for (int i = 0; i < 20; ++i) REQUIRE(s.sample(l) == 1);
    REQUIRE_THROWS_AS(s.sample(std::span<const float>{}), InputError);
  }
}
