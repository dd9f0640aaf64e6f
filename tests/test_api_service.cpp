// The API service (serve/api_service.hpp) driven directly, without HTTP: each
// request handed to it in memory, each generation's Exchange drained as a
// binding would. The protocol's cases: the route table, the checks before a
// body is read, OpenAI's shapes of whole and streamed answers, the limits.
// (test_server.cpp runs the same service behind the example's HTTP binding.)
#include <chrono>
#include <thread>

#include "common.hpp"
#include "streamllm/serve/api_service.hpp"

using namespace streamllm;
using json = nlohmann::json;
using serve::ApiService;
using serve::HttpReply;
using serve::HttpRequest;

namespace {

// A service over its own Llama (sharing the test model's weights), so that
// the library's generate can run beside it on test::model().
struct Service {
  Llama<test::Stories> model{test::model().weights()};
  ApiService api;
  explicit Service(serve::ServiceOptions opt = {}) : api(model, test::tok(), std::move(opt)) { api.start(); }
  ~Service() { api.stop(); }
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;
};

HttpRequest request(std::string method, std::string target, std::string body = {},
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
  HttpRequest r{std::move(method), std::move(target), std::move(headers), std::move(body)};
  if (r.header("host").empty()) r.headers.emplace_back("host", "127.0.0.1:8080");
  if (!r.body.empty() && r.header("content-type").empty()) r.headers.emplace_back("content-type", "application/json");
  return r;
}

// The whole reply to a request, waiting out a generation's Exchange.
HttpReply answer(ApiService& api, const HttpRequest& req) {
  ApiService::Handled h = api.handle(req);
  if (!h.exchange) return h.reply;
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!h.exchange->take(body)) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  HttpReply r = *h.exchange->head();
  r.body = std::move(body);
  return r;
}

HttpReply post(ApiService& api, const std::string& path, const json& body) {
  return answer(api, request("POST", path, body.dump()));
}

std::string error_message(const HttpReply& r) { return json::parse(r.body)["error"]["message"].get<std::string>(); }

// A stream's events: each "data: ..." payload, [DONE] included.
std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> out;
  for (std::size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const std::size_t end = body.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end + 2;
  }
  return out;
}

std::string library_completion(const std::string& prompt, int n) {
  KVCache<test::Stories> cache;
  GenerationOptions opt;
  opt.max_new_tokens = n;
  std::string out;
  generate(test::model(), test::tok(), cache, std::string_view(prompt), opt, [&](std::string_view p) {
    out += p;
    return true;
  });
  return out;
}

}  // namespace

TEST_CASE("each endpoint answers its method and OPTIONS, other methods get 405 with Allow, and other paths 404", "[service]") {
  Service s;
  struct Case {
    const char* path;
    const char* method;
    const char* body;
    int status;
  };
  const std::string model_path = "/v1/models/" + s.api.options().model_name;
  const Case cases[] = {
      {"/health", "GET", "", 200},
      {"/health", "HEAD", "", 200},
      {"/metrics", "GET", "", 200},
      {"/v1/models", "GET", "", 200},
      {model_path.c_str(), "GET", "", 200},
      {"/v1/models/someone-else", "GET", "", 404},
      {"/tokenize", "POST", R"({"content": "Once upon a time"})", 200},
      {"/detokenize", "POST", R"({"tokens": [1, 403, 407]})", 200},
  };
  for (const Case& c : cases) {
    INFO(c.method << " " << c.path);
    const HttpReply r = answer(s.api, request(c.method, c.path, c.body));
    REQUIRE(r.status == c.status);
    const HttpReply other = answer(s.api, request(std::string(c.method) == "POST" ? "GET" : "POST", c.path, "{}"));
    REQUIRE(other.status == 405);
    const std::string allow = std::string(c.method) == "POST" ? "POST, OPTIONS" : "GET, OPTIONS";
    REQUIRE(other.header("Allow") == allow);
    REQUIRE(json::parse(other.body)["error"]["code"] == 405);
    const HttpReply preflight = answer(s.api, request("OPTIONS", c.path));
    REQUIRE(preflight.status == 204);
    REQUIRE(preflight.header("Allow") == allow);
  }
  for (const char* path : {"/v1/completions", "/completions", "/v1/chat/completions", "/chat/completions"})
    REQUIRE(answer(s.api, request("GET", path)).header("Allow") == "POST, OPTIONS");
  const HttpReply none = answer(s.api, request("GET", "/no/such/path"));
  REQUIRE(none.status == 404);
  REQUIRE(json::parse(none.body)["error"]["type"] == "not_found_error");
  REQUIRE(json::parse(answer(s.api, request("GET", "/v1/models")).body)["data"][0]["id"] == s.api.options().model_name);
  REQUIRE(json::parse(answer(s.api, request("POST", "/tokenize", R"({"content": "Once"})")).body)["tokens"].size() >= 1);
}

TEST_CASE("/metrics counts each request under its route's name, an alias's under the endpoint it serves", "[service]") {
  Service s;
  REQUIRE(post(s.api, "/chat/completions", json{{"messages", json::array()}}).status == 400);
  REQUIRE(post(s.api, "/completions", json{{"prompt", "Once"}, {"max_tokens", 2}}).status == 200);
  REQUIRE(answer(s.api, request("GET", "/no/such/path")).status == 404);
  const std::string m = answer(s.api, request("GET", "/metrics")).body;
  REQUIRE_THAT(m, Catch::Contains(R"(streamllm_requests_total{endpoint="/v1/chat/completions",status="400"} 1)"));
  REQUIRE_THAT(m, Catch::Contains(R"(streamllm_requests_total{endpoint="/v1/completions",status="200"} 1)"));
  REQUIRE_THAT(m, Catch::Contains(R"(streamllm_requests_total{endpoint="other",status="404"} 1)"));
}

TEST_CASE("the Host, the key and the body's type and bytes are checked before the body is read", "[service][errors]") {
  serve::ServiceOptions opt;
  opt.api_key = "sesame";
  Service s(opt);
  const json body = {{"prompt", "Hi"}, {"max_tokens", 2}};
  const HttpReply no_key = post(s.api, "/v1/completions", body);
  REQUIRE(no_key.status == 401);
  REQUIRE(no_key.header("WWW-Authenticate") == "Bearer");
  REQUIRE(json::parse(no_key.body)["error"]["type"] == "authentication_error");
  REQUIRE(answer(s.api, request("GET", "/health")).status == 200);  // open without the key
  const auto with_key = [](HttpRequest r) {
    r.headers.emplace_back("authorization", "Bearer sesame");
    return r;
  };
  REQUIRE(answer(s.api, with_key(request("POST", "/v1/completions", body.dump()))).status == 200);
  const HttpReply foreign = answer(s.api, with_key(request("GET", "/v1/models", {}, {{"host", "evil.example:80"}})));
  REQUIRE(foreign.status == 403);
  REQUIRE(json::parse(foreign.body)["error"]["type"] == "permission_error");
  const HttpReply plain =
      answer(s.api, with_key(request("POST", "/v1/completions", body.dump(), {{"content-type", "text/plain"}})));
  REQUIRE(plain.status == 415);
  const HttpReply bytes = answer(s.api, with_key(request("POST", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}")));
  REQUIRE(bytes.status == 400);
  REQUIRE_THAT(error_message(bytes), Catch::Contains("UTF-8"));
  const HttpReply broken = answer(s.api, with_key(request("POST", "/v1/completions", "{not json")));
  REQUIRE(broken.status == 400);
  REQUIRE_THAT(error_message(broken), Catch::Contains("not valid JSON"));
}

TEST_CASE("a completion through the service is the library's, whole and streamed, in OpenAI's shapes", "[service]") {
  Service s;
  const std::string want = library_completion("Once upon a time", 24);
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  const HttpReply whole = post(s.api, "/v1/completions", req);
  REQUIRE(whole.status == 200);
  REQUIRE(whole.header("Content-Type") == "application/json");
  const json w = json::parse(whole.body);
  REQUIRE(w["object"] == "text_completion");
  REQUIRE(w["choices"][0]["text"] == want);
  REQUIRE(w["choices"][0]["finish_reason"] == "length");
  REQUIRE(w["usage"]["completion_tokens"] == 24);
  REQUIRE(w["timings"]["predicted_n"] == 24);

  json streamed = req;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const HttpReply stream = post(s.api, "/v1/completions", streamed);
  REQUIRE(stream.status == 200);
  REQUIRE(stream.header("Content-Type") == "text/event-stream");
  const auto ev = events(stream.body);
  REQUIRE(ev.size() >= 3);
  REQUIRE(ev.back() == "[DONE]");
  std::string text;
  for (std::size_t i = 0; i + 2 < ev.size(); ++i) {  // pieces, then the finish
    const json e = json::parse(ev[i]);
    REQUIRE(e["object"] == "text_completion");
    REQUIRE(e.contains("usage"));
    REQUIRE(e["usage"].is_null());
    text += e["choices"][0]["text"].get<std::string>();
  }
  REQUIRE(text == want);
  REQUIRE(json::parse(ev[ev.size() - 3])["choices"][0]["finish_reason"] == "length");
  const json usage = json::parse(ev[ev.size() - 2]);
  REQUIRE(usage["choices"].empty());
  REQUIRE(usage["usage"]["completion_tokens"] == 24);

  // A chat stream opens each choice with its role, and ends each with an empty delta.
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                     {"max_tokens", 8},
                     {"n", 2},
                     {"stream", true},
                     {"temperature", 0}};
  const auto chat_events = events(post(s.api, "/v1/chat/completions", chat).body);
  REQUIRE(chat_events.back() == "[DONE]");
  for (std::size_t c = 0; c < 2; ++c) {
    const json first = json::parse(chat_events[c]);
    REQUIRE(first["object"] == "chat.completion.chunk");
    REQUIRE(first["choices"][0]["index"] == c);
    REQUIRE(first["choices"][0]["delta"]["role"] == "assistant");
  }
  int finishes = 0;
  for (const auto& e : chat_events)
    if (e != "[DONE]" && !json::parse(e)["choices"][0]["finish_reason"].is_null()) {
      REQUIRE(json::parse(e)["choices"][0]["delta"].empty());
      ++finishes;
    }
  REQUIRE(finishes == 2);
}

TEST_CASE("a full service answers 429, a draining one 503 and a full binding 503, each with Retry-After", "[service][errors]") {
  serve::ServiceOptions opt;
  opt.max_sequences = 1;
  opt.max_waiting = 0;
  opt.window = 60;  // a sink+window cache: the endless answer never fills it
  opt.retry_after_s = 3;
  Service s(opt);
  const json endless = {{"prompt", "Once"}, {"max_tokens", 1 << 20}, {"ignore_eos", true}, {"stream", true}};
  ApiService::Handled running = s.api.handle(request("POST", "/v1/completions", endless.dump()));
  REQUIRE(running.exchange);
  std::string first;  // its first piece: the sequence holds the batch's one place
  for (int i = 0; i < 5000 && first.empty(); ++i) {
    running.exchange->take(first);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(!first.empty());
  const HttpReply busy = post(s.api, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}});
  REQUIRE(busy.status == 429);
  REQUIRE(busy.header("Retry-After") == "3");
  REQUIRE(json::parse(busy.body)["error"]["type"] == "rate_limit_error");
  running.exchange->cancel();
  std::string tail;
  for (int i = 0; i < 5000 && !running.exchange->take(tail); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE_THAT(tail, Catch::EndsWith("data: [DONE]\n\n"));

  const HttpReply full = s.api.unavailable("too many connections");
  REQUIRE(full.status == 503);
  REQUIRE(full.header("Retry-After") == "3");
  REQUIRE(json::parse(full.body)["error"]["message"] == "too many connections");

  s.api.drain(std::chrono::milliseconds(100));
  const HttpReply draining = post(s.api, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}});
  REQUIRE(draining.status == 503);
  REQUIRE(draining.header("Retry-After") == "3");
  REQUIRE(answer(s.api, request("GET", "/health")).status == 503);
}
