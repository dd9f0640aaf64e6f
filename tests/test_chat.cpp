// Chat sessions: KV reuse across turns, the Llama 2 template, and a session
// that stays usable whatever a turn does.
#include "common.hpp"
#include "streamllm/generation/chat.hpp"

using namespace streamllm;
using test::greedy;
using test::model;
using test::Stories;
using test::tok;

namespace {

std::unique_ptr<KVCacheBase<Stories>> dense() { return std::make_unique<KVCache<Stories>>(); }
std::unique_ptr<KVCacheBase<Stories>> sink_window(int s, int w) {
  return std::make_unique<DynamicSinkWindowKVCache<Stories>>(s, w);
}

}  // namespace

TEST_CASE("a turn is BOS + [INST] ... [/INST], with the system prompt in the first turn only", "[chat]") {
  ChatSession<Stories> chat(model(), tok(), dense(), "You tell stories.");
  chat.ask("Tell me about a cat.", greedy(8, true), nullptr);
  chat.ask("  And a dog?  ", greedy(8, true), nullptr);
  std::vector<TokenId> first{1}, second{1};
  const auto a = tok().encode("[INST] <<SYS>>\nYou tell stories.\n<</SYS>>\n\nTell me about a cat. [/INST]", false);
  const auto b = tok().encode("[INST] And a dog? [/INST]", false);
  first.insert(first.end(), a.begin(), a.end());
  second.insert(second.end(), b.begin(), b.end());
  REQUIRE(chat.turns().at(0).prompt == first);
  REQUIRE(chat.turns().at(1).prompt == second);
  for (const auto& t : chat.turns()) REQUIRE(t.answer.back() == tok().eos());
  REQUIRE(chat.history_tokens() == chat.history().size());
}

TEST_CASE("turn 2 with KV reuse gives the logits of a fresh prefill of the whole history", "[chat]") {
  struct Case {
    const char* name;
    int sinks, window;
  };
  for (const Case c : {Case{"dense", -1, 0}, Case{"sink+window 4+60", 4, 60}, Case{"window only 0+48", 0, 48}}) {
    auto make = [&] { return c.sinks < 0 ? dense() : sink_window(c.sinks, c.window); };
    ChatSession<Stories> chat(model(), tok(), make(), "Be kind.");
    chat.ask("Once upon a time there was a frog.", greedy(40, true), nullptr);
    const std::size_t before = chat.history_tokens();
    const auto reused = chat.prefill_turn("What did the frog do next?");
    const std::vector<float> got(reused.begin(), reused.end());
    const auto& turn = chat.turns().back();
    INFO(c.name);
    // Only the new turn was prefilled.
    REQUIRE(chat.last_turn().prefilled == turn.prompt.size());
    REQUIRE(chat.history_tokens() == before + turn.prompt.size());
    // A fresh cache given the whole history in one pass.
    auto fresh = make();
    const auto history = chat.history();
    REQUIRE(history.size() == chat.history_tokens());
    const auto want = model().prefill(history, *fresh);
    REQUIRE(test::max_abs_diff(got, want) <= 1e-4f);
  }
}

TEST_CASE("an empty turn, a turn too long for a dense cache, and a stop leave the session usable", "[chat][errors]") {
  ChatSession<Stories> chat(model(), tok(), dense());
  chat.ask("Hello there.", greedy(10, true), nullptr);
  const auto turns = chat.turns().size();
  const auto tokens = chat.history_tokens();

  REQUIRE_THROWS_AS(chat.ask("   \n", greedy(10, true), nullptr), InputError);
  std::string long_turn;
  for (int i = 0; i < 200; ++i) long_turn += "The cat sat on the mat. ";
  REQUIRE_THROWS_WITH(chat.ask(long_turn, greedy(10, true), nullptr),
                      Catch::Contains("does not fit") && Catch::Contains("sink+window") && Catch::Contains("--window"));
  REQUIRE(chat.turns().size() == turns);
  REQUIRE(chat.history_tokens() == tokens);

  int pieces = 0;
  const auto stopped = chat.ask("Tell me a story.", greedy(100, true), [&](std::string_view) { return ++pieces < 3; });
  REQUIRE(stopped.stop == StopReason::Cancelled);
  REQUIRE(chat.turns().back().answer.back() == tok().eos());
  REQUIRE(chat.history_tokens() == chat.history().size());

  REQUIRE_THROWS_WITH(
      chat.ask("Again.", greedy(100, true), [](std::string_view) -> bool { throw std::runtime_error("client gone"); }),
      Catch::Contains("client gone"));
  REQUIRE(chat.history_tokens() == chat.history().size());

  const auto ok = chat.ask("And then?", greedy(20, true), nullptr);
  REQUIRE(ok.answer_tokens > 0);
  REQUIRE(chat.history_tokens() == chat.history().size());
  chat.reset();
  REQUIRE(chat.history_tokens() == 0);
  REQUIRE(chat.turns().empty());
}

TEST_CASE("a dense session at its end stops answering with a clear error, a sink+window one never does", "[chat]") {
  ChatSession<Stories> full(model(), tok(), dense());
  bool refused = false;
  for (int i = 0; i < 60 && !refused; ++i) {
    try {
      full.ask("Tell me more about the little bird and its friends.", greedy(64, true), nullptr);
      REQUIRE(full.history_tokens() <= static_cast<std::size_t>(Stories::MaxSeq));
      REQUIRE(full.history_tokens() == full.history().size());
    } catch (const CacheFullError& e) {
      refused = true;
      REQUIRE_THAT(e.what(), Catch::Contains("dense KV cache"));
    }
  }
  REQUIRE(refused);

  ChatSession<Stories> stream(model(), tok(), sink_window(4, 60));
  for (int i = 0; i < 30; ++i) stream.ask("Tell me more about the little bird and its friends.", greedy(64, true), nullptr);
  REQUIRE(stream.history_tokens() > static_cast<std::size_t>(Stories::MaxSeq));
  REQUIRE(stream.cache().occupancy() == 64);
}
