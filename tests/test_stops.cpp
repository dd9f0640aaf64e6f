// Stop strings held back across pieces, the stop reasons told apart, the
// OpenAI penalties and log-probabilities, on the real model.
#include <cmath>

#include "common.hpp"

using namespace streamllm;
using test::greedy;
using test::model;
using test::Stories;
using test::tok;

namespace {

struct Run {
  GenerationResult res;
  std::vector<std::string> pieces;
  std::string text() const {
    std::string all;
    for (const auto& p : pieces) all += p;
    return all;
  }
};

Run run(const std::vector<TokenId>& prompt, GenerationOptions opt) {
  KVCache<Stories> cache;
  Run r;
  r.res = generate(model(), tok(), cache, std::span<const TokenId>(prompt), opt, [&](const Piece& p) {
    r.pieces.emplace_back(p.text);
    return true;
  });
  return r;
}

}  // namespace

TEST_CASE("a stop string split over pieces is never emitted, and the text ends where it begins", "[stops]") {
  StopStrings s({"o w", "xyz"});
  std::string out;
  for (const char* piece : {"Hel", "lo", " wo", "rld"}) out += s.push(piece);
  REQUIRE(s.matched());
  REQUIRE(out == "Hell");
  // A tail that stops matching is released at once, and at the end all of it.
  StopStrings t({"abcd"});
  REQUIRE(t.push("xab") == "x");
  REQUIRE(t.push("cx") == "abcx");
  REQUIRE(t.push("ab") == "");
  REQUIRE(t.flush() == "ab");
  REQUIRE_FALSE(t.matched());
  REQUIRE_THROWS_AS(StopStrings({"a", "b", "c", "d", "e"}), InputError);
  REQUIRE_THROWS_AS(StopStrings({""}), InputError);
}

TEST_CASE("generation ends before the first stop string, which spans tokens, and streams the rest", "[stops][generate]") {
  const auto g = test::goldens("dense").front();
  const int n = g.steps + 1 - static_cast<int>(g.prompt_ids.size());
  const Run plain = run(g.prompt_ids, greedy(n));
  const std::string full = plain.text();
  // Stops that start inside one piece and end inside another.
  for (std::size_t at : {std::size_t(20), full.size() / 2, full.size() - 12}) {
    const std::string stop = full.substr(at, 7);
    auto opt = greedy(n);
    opt.stop_strings = {"never in this text", stop};
    const Run r = run(g.prompt_ids, opt);
    const std::size_t first = full.find(stop);
    INFO("stop '" << stop << "'");
    REQUIRE(r.res.stop == StopReason::StopString);
    REQUIRE(r.text() == full.substr(0, first));
    REQUIRE(r.res.text == r.text());
    for (const auto& p : r.pieces) REQUIRE_FALSE(p.empty());
  }
  // A stop string that begins to match and then does not: nothing is lost.
  auto opt = greedy(n);
  opt.stop_strings = {full.substr(30, 6) + "\x01"};
  const Run r = run(g.prompt_ids, opt);
  REQUIRE(r.res.stop == StopReason::MaxTokens);
  REQUIRE(r.text() == full);
  REQUIRE(r.res.tokens == plain.res.tokens);
}

TEST_CASE("stop reasons tell apart EOS, a stop token, the limit, a cancel and a throwing callback", "[stops][generate]") {
  const auto g = test::goldens("dense").front();
  const std::size_t P = g.prompt_ids.size();
  auto opt = greedy(100);
  opt.stop_tokens = {g.ids[P + 3]};
  REQUIRE(run(g.prompt_ids, opt).res.stop == StopReason::StopToken);
  REQUIRE(run(g.prompt_ids, greedy(5)).res.stop == StopReason::MaxTokens);
  // EOS (greedy stories260K loops rather than end a story: a logit bias makes it end).
  GenerationOptions eos;
  eos.max_new_tokens = 400;
  eos.sampling.logit_bias = {{tok().eos(), 100.0f}};
  const Run e = run(g.prompt_ids, eos);
  REQUIRE(e.res.stop == StopReason::EndOfSequence);
  REQUIRE(e.res.tokens.back() == tok().eos());
  KVCache<Stories> cache;
  const auto cancelled =
      generate(model(), tok(), cache, std::span<const TokenId>(g.prompt_ids), greedy(50), [](std::string_view) { return false; });
  REQUIRE(cancelled.stop == StopReason::Cancelled);
  cache.clear();
  REQUIRE_THROWS_WITH(generate(model(), tok(), cache, std::span<const TokenId>(g.prompt_ids), greedy(50),
                               [](std::string_view) -> bool { throw std::runtime_error("client gone"); }),
                      Catch::Contains("client gone"));
}

TEST_CASE("no limit on tokens: a sink+window generation runs past the model's context", "[stops][generate]") {
  DynamicSinkWindowKVCache<Stories> cache(4, 60);
  GenerationOptions opt = greedy(-1);
  int pieces = 0;
  const auto res = generate(model(), tok(), cache, std::span<const TokenId>(std::vector<TokenId>{1, 403}), opt,
                            [&](std::string_view) { return ++pieces < 700; });
  REQUIRE(res.stop == StopReason::Cancelled);
  REQUIRE(res.tokens.size() >= 700);
  REQUIRE(cache.size() > Stories::MaxSeq);
}

TEST_CASE("presence and frequency penalties change logits by OpenAI's formula", "[sampler]") {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  p.logit_bias = {{3, -2.0f}};
  Sampler s(p);
  const std::vector<float> l{1.0f, 4.0f, 0.5f, 2.0f, -1.0f};
  std::vector<float> forced = l;
  forced[1] = 10.0f;  // the sampler chooses 1, twice
  REQUIRE(s.sample(forced) == 1);
  REQUIRE(s.sample(forced) == 1);
  REQUIRE(s.times_chosen(1) == 2);
  const auto adj = s.adjusted_logits(l);
  // mu[j] - c[j] * frequency - (c[j] > 0) * presence, and the bias.
  REQUIRE(adj[1] == Approx(4.0f - 2 * 0.3f - 0.5f));
  REQUIRE(adj[3] == Approx(2.0f - 2.0f));
  for (std::size_t j : {std::size_t(0), std::size_t(2), std::size_t(4)}) REQUIRE(adj[j] == l[j]);
  // Greedy picks from the adjusted logits: 4 - 0.5 - 0.3 k stays above 1 for k < 8.
  Sampler g(p);
  std::vector<TokenId> chosen;
  for (int i = 0; i < 5; ++i) chosen.push_back(g.sample(l));
  REQUIRE(chosen == std::vector<TokenId>{1, 1, 1, 1, 1});
  p.frequency_penalty = 2.0f;
  Sampler h(p);
  REQUIRE(h.sample(l) == 1);
  REQUIRE(h.sample(l) == 1);  // 4 - 2 - 0.5 = 1.5 > 1.0
  REQUIRE(h.sample(l) == 0);  // 4 - 4 - 0.5 < 1.0
  p.presence_penalty = 3.0f;
  REQUIRE_THROWS_WITH(Sampler(p), Catch::Contains("presence_penalty"));
}

TEST_CASE("logprobs are the log-softmax of the model's logits, with the most likely alternatives", "[sampler][generate]") {
  const auto g = test::goldens("dense").front();
  auto opt = greedy(12);
  opt.logprobs = 3;
  opt.sampling.temperature = 0.8f;
  opt.sampling.seed = 5;
  std::vector<std::size_t> per_piece;
  KVCache<Stories> cache;
  const auto res = generate(model(), tok(), cache, std::span<const TokenId>(g.prompt_ids), opt, [&](const Piece& p) {
    REQUIRE(p.tokens.size() == p.logprobs.size());
    per_piece.push_back(p.tokens.size());
    return true;
  });
  REQUIRE(res.logprobs.size() == res.tokens.size());
  std::size_t streamed = 0;
  for (auto n : per_piece) streamed += n;
  REQUIRE(streamed == res.tokens.size());
  // Replay: the same tokens fed one by one, the log-softmax in double.
  KVCache<Stories> replay;
  auto logits = model().prefill(g.prompt_ids, replay);
  for (std::size_t i = 0; i < res.tokens.size(); ++i) {
    double mx = -1e30, z = 0;
    for (float v : logits) mx = std::max(mx, double(v));
    for (float v : logits) z += std::exp(double(v) - mx);
    const auto lp = [&](TokenId t) { return double(logits[static_cast<std::size_t>(t)]) - mx - std::log(z); };
    const auto& got = res.logprobs[i];
    REQUIRE(got.id == res.tokens[i]);
    REQUIRE(got.logprob == Approx(lp(res.tokens[i])).margin(1e-5));
    REQUIRE(got.top.size() == 3);
    REQUIRE(got.top[0].first == argmax(logits));
    for (std::size_t k = 0; k < 3; ++k) REQUIRE(got.top[k].second == Approx(lp(got.top[k].first)).margin(1e-5));
    REQUIRE(got.top[0].second >= got.top[1].second);
    REQUIRE(got.top[1].second >= got.top[2].second);
    if (i + 1 < res.tokens.size()) logits = model().decode(res.tokens[i], replay);
  }
}
