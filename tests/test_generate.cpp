// Generation with streaming, end to end on the real model and tokenizer.
#include "common.hpp"

using namespace streamllm;
using test::greedy;
using test::model;
using test::Stories;
using test::tok;

TEST_CASE("greedy generation streams each golden's text exactly, piece by piece", "[generate][golden]") {
  for (const auto& g : test::goldens("dense")) {
    const int n = g.steps + 1 - static_cast<int>(g.prompt_ids.size());
    for (bool echo : {true, false}) {
      KVCache<Stories> cache;
      auto opt = greedy(n);
      opt.echo_prompt = echo;
      std::vector<std::string> pieces;
      const auto res = generate(model(), tok(), cache, std::span<const TokenId>(g.prompt_ids), opt, [&](std::string_view p) {
        pieces.emplace_back(p);
        return true;
      });
      INFO(g.name << (echo ? " with" : " without") << " the prompt echoed");
      REQUIRE(res.tokens == std::vector<TokenId>(g.ids.begin() + static_cast<std::ptrdiff_t>(g.prompt_ids.size()), g.ids.end()));
      REQUIRE(res.stop == StopReason::MaxTokens);
      std::string all;
      for (const auto& p : pieces) {
        REQUIRE_FALSE(p.empty());
        REQUIRE(test::valid_utf8(p));
        all += p;
      }
      const std::string prompt_text = tok().decode(std::span<const TokenId>(g.prompt_ids).subspan(1));
      REQUIRE(all == (echo ? g.text : g.text.substr(prompt_text.size())));
      // The cache holds everything but the last sampled token.
      REQUIRE(cache.size() == g.steps);
      REQUIRE(res.time_to_first_token_s > 0);
      REQUIRE(res.tokens_per_s() > 0);
    }
  }
}

TEST_CASE("generation stops when the callback asks, at a stop token, and when the cache is full", "[generate]") {
  const auto g = test::goldens("dense").front();
  const std::span<const TokenId> prompt(g.prompt_ids);
  const std::size_t P = prompt.size();
  {
    KVCache<Stories> cache;
    int calls = 0;
    const auto res = generate(model(), tok(), cache, prompt, greedy(100), [&](std::string_view) { return ++calls < 3; });
    REQUIRE(res.stop == StopReason::Cancelled);
    REQUIRE(calls == 3);
    REQUIRE(res.tokens.size() == 3);
  }
  {
    KVCache<Stories> cache;
    auto opt = greedy(100);
    opt.stop_tokens = {g.ids[P + 4]};
    const auto res = generate(model(), tok(), cache, prompt, opt, nullptr);
    REQUIRE(res.stop == StopReason::StopToken);
    REQUIRE(res.tokens.back() == g.ids[P + 4]);
  }
  {
    KVCache<Stories> cache;
    const auto res = generate(model(), tok(), cache, prompt, greedy(10000), nullptr);
    REQUIRE(res.stop == StopReason::CacheFull);
    REQUIRE(cache.size() == Stories::MaxSeq);
    REQUIRE(res.tokens.size() == Stories::MaxSeq - P + 1);
  }
}

TEST_CASE("seeded sampling generates the same text twice", "[generate][sampler]") {
  GenerationOptions opt;
  opt.max_new_tokens = 60;
  opt.sampling.temperature = 0.9f;
  opt.sampling.top_p = 0.9f;
  opt.sampling.seed = 2024;
  std::string a, b;
  KVCache<Stories> c1, c2;
  generate(model(), tok(), c1, "Lily liked", opt, [&](std::string_view p) {
    a += p;
    return true;
  });
  generate(model(), tok(), c2, "Lily liked", opt, [&](std::string_view p) {
    b += p;
    return true;
  });
  REQUIRE(a == b);
  REQUIRE(a.size() > 20);
}
