// Caches reused: cut back, copied, saved and loaded; and the scheduler
// continuing conversations from the caches it kept, dense and sink+window,
// with the answers a fresh prefill (or a ChatSession) gives.
#include <fstream>
#include <future>
#include <thread>

#include "common.hpp"

using namespace streamllm;
using test::kTurns;
using test::model;
using test::Stories;
using test::tok;

namespace {
using Role = ChatMessage::Role;

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

std::vector<TokenId> golden_ids(std::size_t n) {
  const auto g = test::goldens("dense").back();  // the longest case
  REQUIRE(g.ids.size() >= n);
  return {g.ids.begin(), g.ids.begin() + static_cast<std::ptrdiff_t>(n)};
}

// A conversation driven through the scheduler as a chat API client would:
// the whole dialog each turn, the model's answers back as text.
struct ApiConversation {
  BatchScheduler<Stories>& sched;
  CacheShape shape;
  KnownAnswers& known;
  std::vector<ChatMessage> messages;

  GenerationResult turn(const std::string& user, int max_tokens) {
    messages.push_back({Role::User, user});
    BatchScheduler<Stories>::Request r;
    r.prompt = encode_dialog(tok(), messages, &known);
    r.cache_shape = shape;
    r.options.max_new_tokens = max_tokens;
    r.options.continue_text = false;
    r.answer_end = answer_end_ids(tok(), ChatTemplate::for_model(tok()));
    std::promise<GenerationResult> result;
    auto done = result.get_future();
    r.on_done = [&result](const GenerationResult& g) { result.set_value(g); };
    sched.submit(std::move(r));
    if (!threaded) sched.run_until_idle();  // else the scheduler's own thread (start())
    const GenerationResult got = done.get();
    known.remember(got.text, got.tokens);
    messages.push_back({Role::Assistant, got.text});
    return got;
  }
  bool threaded = false;
};

BatchScheduler<Stories>::Options pooled(std::size_t mib) {
  BatchScheduler<Stories>::Options o;
  o.pool.max_bytes = mib << 20;
  return o;
}

}  // namespace

TEST_CASE("a dense cache cut back or copied gives the logits of a fresh prefill", "[cache]") {
  const auto ids = golden_ids(120);
  KVCache<Stories> full;
  model().prefill(ids, full);
  for (std::int64_t keep : {1, 37, 100}) {
    auto copied = full.copy_prefix(keep, 300);
    REQUIRE(copied->size() == keep);
    REQUIRE(copied->capacity() >= 300);
    KVCache<Stories> cut;
    model().prefill(ids, cut);
    cut.truncate(keep);
    const std::span<const TokenId> rest(ids.data() + keep, ids.size() - static_cast<std::size_t>(keep));
    const auto a = copy(model().prefill(rest, cut));
    const auto b = copy(model().prefill(rest, *copied));
    KVCache<Stories> fresh;
    const auto want = copy(model().prefill(ids, fresh));
    INFO("kept " << keep);
    REQUIRE(test::max_abs_diff(a, want) <= 1e-4f);
    REQUIRE(a == b);
  }
}

TEST_CASE("a dense cache grows in place: its tokens stay where they are, and the pool hands a conversation on grown", "[cache]") {
  const auto ids = golden_ids(120);
  auto cache = std::make_unique<KVCache<Stories>>(64);
  model().prefill({ids.data(), 60}, *cache);
  KVSegment before, after;
  REQUIRE(cache->segments(3, 60, &before) == 1);
  const std::size_t bytes64 = cache->bytes();
  REQUIRE_FALSE(cache->has_room(60));
  REQUIRE(cache->grow(32));  // it has that already
  REQUIRE(cache->grow(200));
  REQUIRE(cache->capacity() == 200);
  REQUIRE(cache->bytes() == bytes64 / 64 * 200);  // what the pool's budget counts
  REQUIRE(cache->segments(3, 60, &after) == 1);
  REQUIRE((after.k == before.k && after.v == before.v));  // not copied
  REQUIRE(cache->has_room(60));
  // Past its reserve (MaxSeq) it cannot grow in place: only a copy can.
  REQUIRE_FALSE(cache->grow(Stories::MaxSeq + 1));
  REQUIRE(cache->capacity() == 200);

  // A pooled conversation taken by a request that needs more room: the
  // same cache, grown, and the next turn gives a fresh prefill's logits.
  CachePoolOptions opt;
  opt.max_bytes = std::size_t(64) << 20;
  CachePool<Stories> pool(opt);
  const KVCache<Stories>* kept = cache.get();
  pool.put(std::move(cache), {ids.begin(), ids.begin() + 60});
  auto taken = pool.take(ids, {0, 0, 400});
  REQUIRE(taken.tokens == 60);
  REQUIRE(taken.cache.get() == kept);
  REQUIRE(taken.cache->capacity() == 400);
  const auto got = copy(model().prefill({ids.data() + 60, 60}, *taken.cache));
  KVCache<Stories> fresh;
  REQUIRE(test::max_abs_diff(got, copy(model().prefill(ids, fresh))) <= 1e-4f);
  // And a copy of a grown cache is a cache of its own with the same tokens.
  const KVCache<Stories> twin(static_cast<const KVCache<Stories>&>(*taken.cache));
  REQUIRE((twin.size() == 120 && twin.capacity() == 400));
  KVSegment a, b;
  taken.cache->segments(Stories::Layers - 1, 120, &a);
  twin.segments(Stories::Layers - 1, 120, &b);
  REQUIRE(a.k != b.k);
  REQUIRE(std::equal(a.k, a.k + 120 * Stories::KVDim, b.k));
  REQUIRE(std::equal(a.v, a.v + 120 * Stories::KVDim, b.v));
}

TEST_CASE("a ring cuts back only until it wraps", "[cache]") {
  const auto ids = golden_ids(100);
  DynamicSinkWindowKVCache<Stories> ring(4, 60);
  model().prefill({ids.data(), 50}, ring);
  REQUIRE(ring.can_truncate(20));
  ring.truncate(20);
  model().prefill({ids.data() + 20, 80}, ring);
  DynamicSinkWindowKVCache<Stories> fresh(4, 60);
  model().prefill(ids, fresh);
  REQUIRE(ring.size() == 100);
  REQUIRE_FALSE(ring.can_truncate(99));
  REQUIRE_THROWS_WITH(ring.truncate(99), Catch::Contains("wrapped"));
  // Its whole history still copies, and continues as the original does.
  auto whole = ring.copy_prefix(100);
  const auto a = copy(model().decode(7, ring));
  const auto b = copy(model().decode(7, *whole));
  const auto c = copy(model().decode(7, fresh));
  REQUIRE(a == b);
  REQUIRE(test::max_abs_diff(a, c) <= 1e-4f);
}

TEST_CASE("a saved cache loads back to bit-equal logits, and other files are refused with the reason", "[cache][errors]") {
  const test::ScratchDir dir("streamllm-cachefile");
  const auto ids = golden_ids(90);
  for (bool ring : {false, true}) {
    std::unique_ptr<KVCacheBase<Stories>> cache;
    if (ring)
      cache = std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 40);
    else
      cache = std::make_unique<KVCache<Stories>>(200);
    model().prefill(ids, *cache);
    const std::string path = (dir.path() / (ring ? "ring.slkv" : "dense.slkv")).string();
    save_cache(path, *cache, ids, model().fingerprint(), "a note");
    auto loaded = load_cache<Stories>(path, model().fingerprint());
    REQUIRE(loaded.ids == ids);
    REQUIRE(loaded.note == "a note");
    REQUIRE(loaded.cache->size() == cache->size());
    REQUIRE(loaded.cache->same_rule(*cache));
    const auto a = copy(model().decode(42, *cache));
    const auto b = copy(model().decode(42, *loaded.cache));
    REQUIRE(a == b);
  }
  const std::string good = (dir.path() / "dense.slkv").string();
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto variant = [&](const std::string& name, std::string b) {
    const std::string p = (dir.path() / name).string();
    std::ofstream(p, std::ios::binary) << b;
    return p;
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;  // inside the keys and values
  std::string version = bytes;
  version[8] = 9;
  REQUIRE_THROWS_WITH(load_cache<Stories>(variant("corrupt", flipped), model().fingerprint()), Catch::Contains("corrupt"));
  REQUIRE_THROWS_WITH(load_cache<Stories>(variant("cut", bytes.substr(0, bytes.size() - 100)), model().fingerprint()),
                      Catch::Contains("truncated"));
  REQUIRE_THROWS_WITH(load_cache<Stories>(variant("tiny", bytes.substr(0, 30)), model().fingerprint()),
                      Catch::Contains("truncated"));
  REQUIRE_THROWS_WITH(load_cache<Stories>(variant("version", version), model().fingerprint()), Catch::Contains("version 9"));
  REQUIRE_THROWS_WITH(load_cache<Stories>(variant("magic", "not a cache file at all, not at all, no"), model().fingerprint()),
                      Catch::Contains("bad magic"));
  // Another model: llama.cpp's F16 file of the same network has other weights' bytes.
  const auto f16 = load_llama<Stories>(test::model_path("stories260K-F16.gguf"));
  REQUIRE(f16.fingerprint() != model().fingerprint());
  REQUIRE_THROWS_WITH(load_cache<Stories>(good, f16.fingerprint()), Catch::Contains("another model"));
  REQUIRE_THROWS_WITH(load_cache<test::Padded260K>(good, model().fingerprint()), Catch::Contains("shape"));
  // The same weights in another file format are the same model.
  const auto f32 = load_llama<Stories>(test::model_path("stories260K-F32.gguf"));
  REQUIRE(f32.fingerprint() == model().fingerprint());
}

TEST_CASE("a ten-turn chat through the scheduler reuses each turn's cache and answers as a ChatSession", "[scheduler][reuse]") {
  BatchScheduler<Stories> sched(model(), tok(), pooled(64));
  KnownAnswers known;
  ApiConversation api{sched, {0, 0, Stories::MaxSeq}, known, {{Role::System, "You tell short stories."}}};
  ChatSession<Stories> chat(model(), tok(), std::make_unique<KVCache<Stories>>(), "You tell short stories.");
  GenerationOptions opt;
  opt.max_new_tokens = 20;
  for (int i = 0; i < 10; ++i) {
    const std::size_t history = chat.history().size();
    chat.ask(kTurns[i], opt, nullptr);
    const auto got = api.turn(kTurns[i], 20);
    INFO("turn " << i + 1);
    REQUIRE(got.text == chat.turns().back().answer_text);
    REQUIRE(got.tokens ==
            std::vector<TokenId>(chat.turns().back().answer.begin(),
                                 chat.turns().back().answer.begin() + static_cast<std::ptrdiff_t>(got.tokens.size())));
    REQUIRE(got.cached_tokens == history);  // everything said before this turn
    REQUIRE(got.prefilled_tokens() == chat.turns().back().prompt.size());
  }
  REQUIRE(sched.pool_entries() == 1);
}

TEST_CASE("a sink+window chat runs 50 turns past its window, each prefilling only its own tokens, in flat memory",
          "[scheduler][reuse]") {
  BatchScheduler<Stories> sched(model(), tok(), pooled(64));
  KnownAnswers known;
  ApiConversation api{sched, {4, 252, 0}, known, {}};
  ChatSession<Stories> chat(model(), tok(), std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 252));
  GenerationOptions opt;
  opt.max_new_tokens = 40;
  std::size_t bytes = 0;
  for (int i = 0; i < 50; ++i) {
    const std::string user = std::string(kTurns[i % 10]) + " Part " + std::to_string(i) + ".";
    const std::size_t history = chat.history().size();
    chat.ask(user, opt, nullptr);
    const auto got = api.turn(user, 40);
    INFO("turn " << i + 1);
    REQUIRE(got.text == chat.turns().back().answer_text);
    REQUIRE(got.cached_tokens == history);
    REQUIRE(got.prefilled_tokens() == chat.turns().back().prompt.size());
    if (i == 0) bytes = sched.pool_bytes();
    REQUIRE(sched.pool_bytes() == bytes);
  }
  REQUIRE(chat.history().size() > 2000);
}

TEST_CASE("an edited earlier message reuses the cache up to the edit and answers as a fresh prefill", "[scheduler][reuse]") {
  BatchScheduler<Stories> sched(model(), tok(), pooled(64));
  const CacheShape dense{0, 0, Stories::MaxSeq};
  KnownAnswers known;
  ApiConversation a{sched, dense, known, {}}, b{sched, dense, known, {}};
  for (int i = 0; i < 3; ++i) {  // two conversations, interleaved
    a.turn(kTurns[i], 16);
    b.turn(kTurns[9 - i], 16);
  }
  // Edit a's second user message and send the dialog again.
  std::vector<ChatMessage> edited(a.messages.begin(), a.messages.end());
  edited[2].content = "What did the dog do next?";
  edited.push_back({Role::User, "And then?"});
  const auto prompt = encode_dialog(tok(), edited, &a.known);
  const std::size_t divergence =
      common_prefix(prompt, encode_dialog(tok(), std::vector<ChatMessage>(a.messages.begin(), a.messages.begin() + 3), &a.known));
  REQUIRE(divergence > test::user_turn_tokens(tok(), kTurns[0]));
  BatchScheduler<Stories>::Request r;
  r.prompt = prompt;
  r.cache_shape = dense;
  r.options.max_new_tokens = 20;
  r.options.continue_text = false;
  std::optional<GenerationResult> done;
  r.on_done = [&](const GenerationResult& g) { done = g; };
  sched.submit(std::move(r));
  sched.run_until_idle();
  REQUIRE(done);
  REQUIRE(done->cached_tokens == divergence);  // up to the edit, and no further
  KVCache<Stories> fresh;
  GenerationOptions opt;
  opt.max_new_tokens = 20;
  opt.continue_text = false;
  const auto want = generate(model(), tok(), fresh, std::span<const TokenId>(prompt), opt, nullptr);
  REQUIRE(done->tokens == want.tokens);
}

TEST_CASE("concurrent requests sharing a long prefix prefill it once and each equal their solo run", "[scheduler][reuse]") {
  BatchScheduler<Stories> sched(model(), tok(), {8, 8, 64, {}});  // no pool: sharing between running sequences
  auto shared = golden_ids(200);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 6; ++i) {
    auto p = shared;
    p.push_back(static_cast<TokenId>(300 + i));
    p.push_back(static_cast<TokenId>(400 + i));
    prompts.push_back(p);
  }
  std::vector<std::optional<GenerationResult>> done(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    BatchScheduler<Stories>::Request r;
    r.prompt = prompts[i];
    r.cache_shape = {0, 0, Stories::MaxSeq};
    r.options.max_new_tokens = 10;
    r.options.stop_at_eos = false;
    r.on_done = [&done, i](const GenerationResult& g) { done[i] = g; };
    sched.submit(std::move(r));
  }
  sched.run_until_idle();
  std::size_t prefilled = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    REQUIRE(done[i]);
    prefilled += done[i]->prefilled_tokens();
    if (i > 0) REQUIRE(done[i]->cached_tokens == shared.size());
    KVCache<Stories> solo;
    GenerationOptions opt;
    opt.max_new_tokens = 10;
    opt.stop_at_eos = false;
    const auto want = generate(model(), tok(), solo, std::span<const TokenId>(prompts[i]), opt, nullptr);
    INFO("request " << i);
    REQUIRE(done[i]->tokens == want.tokens);
  }
  REQUIRE(prefilled == shared.size() + 2 * prompts.size());
}

TEST_CASE("kept caches go to a folder and a new scheduler continues from them", "[scheduler][reuse]") {
  const test::ScratchDir dir("streamllm-pooldir");
  BatchScheduler<Stories>::Options o;
  o.pool.max_bytes = 0;  // nothing in memory: every kept cache goes to disk
  o.pool.dir = dir.path().string();
  std::vector<ChatMessage> messages;
  KnownAnswers known;
  {
    BatchScheduler<Stories> first(model(), tok(), o);
    ApiConversation api{first, {0, 0, Stories::MaxSeq}, known, {}};
    api.turn(kTurns[0], 16);
    api.turn(kTurns[1], 16);
    messages = api.messages;
  }
  std::vector<std::string> warnings;
  o.pool.warn = [&](const std::string& w) { warnings.push_back(w); };
  {  // a stray file: ignored with a warning
    std::ofstream(dir.path() / "stray.slkv") << "garbage";
  }
  BatchScheduler<Stories> second(model(), tok(), o);
  REQUIRE(warnings.size() == 1);
  REQUIRE_THAT(warnings[0], Catch::Contains("stray.slkv"));
  ApiConversation api{second, {0, 0, Stories::MaxSeq}, known, messages};
  auto next = messages;
  next.push_back({Role::User, kTurns[2]});
  const std::size_t history =
      encode_dialog(tok(), next, &known).size() - test::user_turn_tokens(tok(), kTurns[2]);
  const auto got = api.turn(kTurns[2], 16);
  REQUIRE(got.cached_tokens == history);
}

// A server's scheduler steps on its own thread, and an answer's closing (its
// last token and EOS) waits for company there: a next turn that comes first
// takes the cache and feeds them with its own prompt, one forward for both.
TEST_CASE("a turn that comes while the last answer's closing waits feeds that closing with its prompt", "[scheduler][reuse]") {
  const test::ScratchDir dir("streamllm-closing");
  auto o = pooled(64);
  o.close_wait = std::chrono::minutes(10);  // nothing else runs: every closing waits for the next turn
  o.pool.dir = dir.path().string();
  KnownAnswers known;
  std::vector<ChatMessage> messages;
  ChatSession<Stories> chat(model(), tok(), std::make_unique<KVCache<Stories>>(), "You tell short stories.");
  GenerationOptions opt;
  opt.max_new_tokens = 20;
  {
    BatchScheduler<Stories> sched(model(), tok(), o);
    sched.start();
    ApiConversation api{sched, {0, 0, Stories::MaxSeq}, known, {{Role::System, "You tell short stories."}}, true};
    TokenId last = -1;
    for (int i = 0; i < 6; ++i) {
      const std::size_t history = chat.history().size();
      chat.ask(kTurns[i], opt, nullptr);
      const auto got = api.turn(kTurns[i], 20);
      INFO("turn " << i + 1);
      REQUIRE(got.text == chat.turns().back().answer_text);
      REQUIRE(got.cached_tokens == history);
      REQUIRE(got.prefilled_tokens() == chat.turns().back().prompt.size());
      // The previous answer's last token, and EOS unless that was it.
      REQUIRE(got.closing_tokens == (i == 0 ? 0u : last == tok().eos() ? 1u : 2u));
      last = got.tokens.back();
      // A waiting closing is a kept conversation, not a running sequence
      // (counted so once the step that ended it is over).
      for (int wait = 0; wait < 1000 && sched.active() > 0; ++wait) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      REQUIRE(sched.active() == 0);
      REQUIRE(sched.pool_entries() == 1);
    }
    messages = api.messages;
    // Draining feeds the last closing (nothing will come to take it): the
    // cache saved holds the whole history, which the next scheduler finds.
    sched.drain(std::chrono::minutes(1));
  }
  BatchScheduler<Stories> next(model(), tok(), o);
  ApiConversation api{next, {0, 0, Stories::MaxSeq}, known, messages};
  const std::size_t history = chat.history().size();
  chat.ask(kTurns[6], opt, nullptr);
  const auto got = api.turn(kTurns[6], 20);
  REQUIRE(got.text == chat.turns().back().answer_text);
  REQUIRE(got.cached_tokens == history);
  REQUIRE(got.closing_tokens == 0);
}

TEST_CASE("a closing that no turn comes for runs alone after close_wait, and the cache is kept whole", "[scheduler][reuse]") {
  auto o = pooled(64);
  o.close_wait = std::chrono::milliseconds(20);
  KnownAnswers known;
  BatchScheduler<Stories> sched(model(), tok(), o);
  sched.start();
  ApiConversation api{sched, {4, 60, 0}, known, {{Role::System, "You tell short stories."}}, true};
  ChatSession<Stories> chat(model(), tok(), std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 60),
                            "You tell short stories.");
  GenerationOptions opt;
  opt.max_new_tokens = 30;
  for (int i = 0; i < 4; ++i) {
    const std::size_t history = chat.history().size();
    chat.ask(kTurns[i], opt, nullptr);
    const auto got = api.turn(kTurns[i], 30);
    INFO("turn " << i + 1);
    REQUIRE(got.text == chat.turns().back().answer_text);
    REQUIRE(got.cached_tokens == history);
    REQUIRE(got.closing_tokens == 0);  // the turn came after it had run
    // The closing runs by itself and the cache goes to the pool.
    for (int wait = 0; wait < 1000 && (sched.active() > 0 || sched.closing() > 0); ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(sched.closing() == 0);
    REQUIRE(sched.pool_entries() == 1);
  }
}
