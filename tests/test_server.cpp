// The example server, started on a free loopback port: completions equal the
// library's output, streamed or not; 32 concurrent streaming clients finish;
// bad requests get 4xx and the server keeps serving; a client that leaves
// cancels its sequence.
#include <atomic>
#include <thread>

#include "common.hpp"
#include "server.hpp"

using namespace streamllm;
using test::Stories;
using json = nlohmann::json;

namespace {

Llama<Stories>& model() { return test::stories_model(); }
const Tokenizer& tok() { return test::stories_tokenizer(); }

// A server on a free loopback port, serving on its own thread. Each has its
// own Llama over the shared weights: a test may run two servers at once, and
// computes the library's side on the test's thread.
struct Running {
  Llama<Stories> own_model{model().weights()};
  server::CompletionServer<Stories> srv;
  int port;
  std::thread thread;
  explicit Running(server::Options o) : srv(own_model, tok(), (o.port = 0, o)), port(srv.bind()), thread([this] { srv.serve(); }) {
    for (int i = 0; i < 200 && !srv.running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~Running() {
    srv.stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
};

// The text of a streamed response: the pieces of its events, and whether it ended with [DONE].
std::pair<std::string, bool> read_events(const std::string& body, bool chat) {
  std::string text;
  bool done = false;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const auto end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const auto j = json::parse(data);
    const auto& choice = j.at("choices").at(0);
    if (chat) {
      if (choice.at("delta").contains("content")) text += choice["delta"]["content"].get<std::string>();
    } else {
      text += choice.at("text").get<std::string>();
    }
  }
  return {text, done};
}

std::string library_completion(const std::string& prompt, int n) {
  KVCache<Stories> cache;
  GenerationOptions opt;
  opt.max_new_tokens = n;
  std::string out;
  generate(model(), tok(), cache, std::string_view(prompt), opt, [&](std::string_view p) { out += p; return true; });
  return out;
}

}  // namespace

TEST_CASE("the server's completions equal the library's, streamed or not", "[server]") {
  Running s({});
  auto c = s.client();
  const auto health = c.Get("/health");
  REQUIRE(health);
  REQUIRE(health->status == 200);
  REQUIRE(json::parse(health->body)["status"] == "ok");

  const std::string want = library_completion("Once upon a time", 40);
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const auto whole = c.Post("/v1/completions", req.dump(), "application/json");
  REQUIRE(whole);
  REQUIRE(whole->status == 200);
  const auto j = json::parse(whole->body);
  REQUIRE(j["object"] == "text_completion");
  REQUIRE(j["choices"][0]["text"] == want);
  REQUIRE(j["choices"][0]["finish_reason"] == "length");
  REQUIRE(j["usage"]["completion_tokens"] == 40);

  json sreq = req;
  sreq["stream"] = true;
  const auto streamed = c.Post("/v1/completions", sreq.dump(), "application/json");
  REQUIRE(streamed);
  REQUIRE(streamed->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
  const auto [text, done] = read_events(streamed->body, false);
  REQUIRE(done);
  REQUIRE(text == want);

  // Chat: the library's ChatSession gives the same answer to the same turn.
  ChatSession<Stories> chat(model(), tok(), std::make_unique<KVCache<Stories>>(), "Be brief.");
  GenerationOptions opt;
  opt.max_new_tokens = 30;
  chat.ask("Tell me about a cat.", opt, nullptr);
  const std::string answer = chat.turns()[0].answer_text;
  const json creq = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell me about a cat."}}}},
                     {"max_tokens", 30}, {"temperature", 0}};
  const auto cw = c.Post("/v1/chat/completions", creq.dump(), "application/json");
  REQUIRE(cw);
  REQUIRE(cw->status == 200);
  REQUIRE(json::parse(cw->body)["choices"][0]["message"]["content"] == answer);
  json cs = creq;
  cs["stream"] = true;
  const auto cstream = c.Post("/v1/chat/completions", cs.dump(), "application/json");
  REQUIRE(cstream);
  REQUIRE(read_events(cstream->body, true) == std::make_pair(answer, true));
}

TEST_CASE("32 concurrent streaming clients all complete with the library's text", "[server]") {
  server::Options o;
  o.max_sequences = 8;
  Running s(o);
  const std::string want = library_completion("The little bird", 30);
  std::atomic<int> ok = 0;
  std::mutex failures_mu;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int i = 0; i < 32; ++i)
    clients.emplace_back([&] {
      auto c = s.client();
      const json req = {{"prompt", "The little bird"}, {"max_tokens", 30}, {"temperature", 0}, {"stream", true}};
      const auto r = c.Post("/v1/completions", req.dump(), "application/json");
      if (r && r->status == 200 && read_events(r->body, false) == std::make_pair(want, true)) {
        ++ok;
      } else {
        std::lock_guard lock(failures_mu);
        failures.push_back(r ? "status " + std::to_string(r->status) + ": " + read_events(r->body, false).first
                             : "error " + httplib::to_string(r.error()));
      }
    });
  for (auto& t : clients) t.join();
  for (const auto& f : failures) UNSCOPED_INFO(f);
  INFO("want: " << want);
  REQUIRE(ok == 32);
}

TEST_CASE("malformed requests get 4xx with a JSON error, and the server keeps serving", "[server][errors]") {
  server::Options o;
  o.max_sequences = 1;
  o.max_waiting = 0;
  Running s(o);
  auto c = s.client();
  const std::pair<const char*, const char*> bad[] = {
      {"/v1/completions", "{not json"},
      {"/v1/completions", "[1, 2]"},
      {"/v1/completions", R"({"max_tokens": 5})"},
      {"/v1/completions", R"({"prompt": 5})"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": -1})"},
      {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})"},
      {"/v1/completions", R"({"prompt": "hi", "n": 3})"},
      {"/v1/chat/completions", R"({"messages": []})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})"},
  };
  for (const auto& [path, body] : bad) {
    const auto r = c.Post(path, body, "application/json");
    INFO(path << " " << body);
    REQUIRE(r);
    REQUIRE(r->status == 400);
    REQUIRE(json::parse(r->body)["error"]["message"].get<std::string>().size() > 5);
  }
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "the cat and the dog ";
  const auto too_long = c.Post("/v1/completions", json{{"prompt", long_prompt}}.dump(), "application/json");
  REQUIRE(too_long->status == 400);
  REQUIRE_THAT(json::parse(too_long->body)["error"]["message"].get<std::string>(), Catch::Contains("tokens"));
  REQUIRE(c.Get("/no/such/path")->status == 404);

  // One sequence at a time and none waiting: a second request while one runs
  // gets 429. The running one cannot end by itself (sink+window cache, EOS
  // ignored, no token limit to speak of) until its client hangs up.
  server::Options one = o;
  one.window = 60;
  Running busy_server(one);
  std::atomic<bool> started = false, checked = false;
  std::thread endless([&] {
    auto c2 = busy_server.client();
    const json req = {{"prompt", "Once"}, {"max_tokens", 1 << 20}, {"ignore_eos", true}, {"stream", true}};
    server::post_streaming(c2, "/v1/completions", req.dump(), [&](const char*, std::size_t) {
      started = true;
      return !checked;
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto c3 = busy_server.client();
  const auto busy = c3.Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 5}}.dump(), "application/json");
  checked = true;
  endless.join();
  REQUIRE(busy);
  REQUIRE(busy->status == 429);
  REQUIRE(json::parse(busy->body)["error"]["type"] == "rate_limit_error");
  for (auto* srv : {&s, &busy_server}) {
    auto ci = srv->client();
    REQUIRE(ci.Get("/health")->status == 200);
    // The hung-up sequence has been cancelled, so the slot is free again.
    int status = 0;
    for (int i = 0; i < 100 && (status == 0 || status == 429); ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const auto fine = ci.Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 5}, {"temperature", 0}}.dump(), "application/json");
      status = fine ? fine->status : 0;
    }
    REQUIRE(status == 200);
  }
}

TEST_CASE("a streaming client that disconnects cancels its sequence", "[server]") {
  server::Options o;
  o.window = 60;  // a sequence that could run for ever
  Running s(o);
  {
    auto c = s.client();
    int events = 0;
    const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 100000}, {"stream", true}};
    server::post_streaming(c, "/v1/completions", req.dump(), [&](const char*, std::size_t) {
      return ++events < 3;  // read a little, then hang up
    });
  }
  auto c = s.client();
  int active = -1;
  for (int i = 0; i < 500 && active != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    active = json::parse(c.Get("/health")->body)["active_sequences"].get<int>();
  }
  REQUIRE(active == 0);
}
