// Continuous batching: sequences joining and leaving at any step produce
// exactly what they produce alone.
#include <random>

#include "common.hpp"
#include "streamllm/generation/scheduler.hpp"

using namespace streamllm;
using test::model;
using test::Stories;
using test::tok;

namespace {

std::unique_ptr<KVCacheBase<Stories>> cache_for(int sinks, int window) {
  if (window <= 0) return std::make_unique<KVCache<Stories>>();
  return std::make_unique<DynamicSinkWindowKVCache<Stories>>(sinks, window);
}

}  // namespace

TEST_CASE("eight golden prompts joining at different steps each reproduce their golden ids", "[scheduler][golden]") {
  std::vector<test::Golden> all = test::goldens("dense");
  for (auto& g : test::goldens("sink_window")) all.push_back(g);
  REQUIRE(all.size() >= 8);
  BatchScheduler<Stories> sched(model(), tok(), {8, 8, 24, {}});  // a small step budget: prompts go in chunks
  std::vector<std::optional<GenerationResult>> done(all.size());
  std::size_t submitted = 0;
  for (int step = 0; submitted < all.size() || sched.active() > 0 || sched.waiting() > 0; ++step) {
    if (submitted < all.size() && step == static_cast<int>(submitted) * 9) {  // one joins every 9 steps
      const auto& g = all[submitted];
      BatchScheduler<Stories>::Request r;
      r.prompt = g.prompt_ids;
      r.cache = cache_for(g.sinks, g.mode == "dense" ? 0 : g.window);
      r.options.max_new_tokens = g.steps + 1 - static_cast<int>(g.prompt_ids.size());
      r.options.stop_at_eos = false;
      r.on_done = [&done, i = submitted](const GenerationResult& c) { done[i] = c; };
      sched.submit(std::move(r));
      ++submitted;
    }
    sched.step();
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    INFO(all[i].name);
    REQUIRE(done[i].has_value());
    REQUIRE(done[i]->tokens ==
            std::vector<TokenId>(all[i].ids.begin() + static_cast<std::ptrdiff_t>(all[i].prompt_ids.size()), all[i].ids.end()));
    REQUIRE(done[i]->stop == StopReason::MaxTokens);
    REQUIRE(done[i]->text == all[i].text.substr(tok().decode(std::span<const TokenId>(all[i].prompt_ids).subspan(1)).size()));
  }
}

TEST_CASE("a hundred sequences arriving, leaving and cancelled at random each equal their solo run", "[scheduler]") {
  std::mt19937 gen(2024);
  const auto goldens = test::goldens("dense");
  struct Plan {
    std::vector<TokenId> prompt;
    int sinks, window, max_tokens, arrive, cancel_at, stop_after;  // cancel_at < 0: never; stop_after < 0: never
    bool throws;
  };
  std::vector<Plan> plans;
  for (int i = 0; i < 100; ++i) {
    const auto& g = goldens[gen() % goldens.size()];
    Plan p;
    const std::size_t len = 1 + gen() % std::min<std::size_t>(g.ids.size() - 1, 120);
    p.prompt.assign(g.ids.begin(), g.ids.begin() + static_cast<std::ptrdiff_t>(len));
    const bool windowed = gen() % 2 == 0;
    p.sinks = windowed ? static_cast<int>(gen() % 5) : 0;
    p.window = windowed ? 24 + static_cast<int>(gen() % 60) : 0;
    p.max_tokens = 1 + static_cast<int>(gen() % 60);
    p.arrive = static_cast<int>(gen() % 150);
    p.cancel_at = gen() % 8 == 0 ? p.arrive + static_cast<int>(gen() % 20) : -1;
    p.stop_after = gen() % 10 == 0 ? 1 + static_cast<int>(gen() % 5) : -1;
    p.throws = gen() % 25 == 0;
    plans.push_back(p);
  }

  BatchScheduler<Stories> sched(model(), tok(), {6, 200, 40, {}});
  std::vector<std::optional<GenerationResult>> done(plans.size());
  std::vector<SequenceId> ids(plans.size());
  std::vector<int> pieces(plans.size(), 0);
  for (int step = 0; step < 100000; ++step) {
    for (std::size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].arrive == step) {
        BatchScheduler<Stories>::Request r;
        r.prompt = plans[i].prompt;
        r.cache = cache_for(plans[i].sinks, plans[i].window);
        r.options.max_new_tokens = plans[i].max_tokens;
        r.on_piece = text_only([&, i](std::string_view) {
          ++pieces[i];
          if (plans[i].throws && pieces[i] == 2) throw std::runtime_error("callback failed");
          return plans[i].stop_after < 0 || pieces[i] < plans[i].stop_after;
        });
        r.on_done = [&done, i](const GenerationResult& c) { done[i] = c; };
        ids[i] = sched.submit(std::move(r));
      }
      if (plans[i].cancel_at == step) sched.cancel(ids[i]);
    }
    const bool busy = sched.step();
    if (!busy && step > 200) break;
  }

  std::size_t compared = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    INFO("sequence " << i);
    REQUIRE(done[i].has_value());
    const GenerationResult& c = *done[i];
    if (plans[i].throws && pieces[i] >= 2) {
      REQUIRE_THAT(c.error, Catch::Contains("callback failed"));
      continue;
    }
    if (c.stop == StopReason::Cancelled && (plans[i].stop_after < 0 || pieces[i] < plans[i].stop_after)) continue;  // cancel()
    // The same request alone.
    auto cache = cache_for(plans[i].sinks, plans[i].window);
    GenerationOptions opt;
    opt.max_new_tokens = plans[i].max_tokens;
    int solo_pieces = 0;
    const auto solo = generate(model(), tok(), *cache, std::span<const TokenId>(plans[i].prompt), opt, [&](std::string_view) {
      ++solo_pieces;
      return plans[i].stop_after < 0 || solo_pieces < plans[i].stop_after;
    });
    REQUIRE(c.tokens == solo.tokens);
    REQUIRE(c.stop == solo.stop);
    ++compared;
  }
  REQUIRE(compared >= 60);
  REQUIRE(sched.active() == 0);
}

TEST_CASE("the scheduler refuses what it cannot run, and more than it takes", "[scheduler][errors]") {
  BatchScheduler<Stories> sched(model(), tok(), {2, 2, 16, {}});
  auto request = [](std::vector<TokenId> prompt) {
    BatchScheduler<Stories>::Request r;
    r.prompt = std::move(prompt);
    r.cache = std::make_unique<KVCache<Stories>>();
    r.options.max_new_tokens = 5;
    return r;
  };
  REQUIRE_THROWS_WITH(sched.submit(request({1, 700})), Catch::Contains("token id 700"));
  REQUIRE_THROWS_AS(sched.submit(request({})), InputError);
  REQUIRE_THROWS_AS(sched.submit(request(std::vector<TokenId>(600, 5))), CacheFullError);
  for (int i = 0; i < 4; ++i) sched.submit(request({1, 403}));
  REQUIRE_THROWS_AS(sched.submit(request({1, 403})), CapacityError);
  sched.run_until_idle();
  REQUIRE(sched.active() == 0);
  REQUIRE_NOTHROW(sched.submit(request({1, 403})));
  sched.run_until_idle();
}
