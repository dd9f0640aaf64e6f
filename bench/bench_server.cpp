// Multi-turn chat through the OpenAI-compatible server, as a client sees it:
// the time to first token (TTFT) of each of 10 turns, the whole history
// resent each turn, with and without prefix reuse; and 16 concurrent clients
// sharing a 500-token system prompt, with and without sharing.
// TinyLlama-1.1B shape, Q8_0, random weights written by the benchmark.
//
// The server is the library's service behind the example's HTTP binding, in
// this process, on a loopback port. STREAMLLM_BENCH_PEER=host:port runs the
// same turns against another OpenAI-compatible server already listening
// there (llama.cpp's llama-server on the file this benchmark writes, whose
// path it prints): chat_turns_peer holds the same conversation with ours
// and then with it, so that both meet the host in the same minute.
#include "bench_support.hpp"  // before httplib: its <resolv.h> breaks Eigen

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "http_server.hpp"
#include "streamllm/serve/api_service.hpp"

namespace {

using namespace streamllm;
using Tiny = presets::TinyLlama1B;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kTurns = 10;

const std::string& model_path() {
  static const std::string path = [] {
    auto p = bench::random_gguf_model<Tiny>("tinyllama", "q8_0");
    std::fprintf(stderr, "model: %s\n", p.c_str());
    return p;
  }();
  return path;
}

Llama<Tiny>& model() {
  static auto m = load_llama<Tiny>(model_path(), bench::load_mode());
  return m;
}

const Tokenizer& tokenizer() {
  static const auto t = Tokenizer::load(model_path());
  return t;
}

// Words of a public-domain book, handed out in order: user messages of about
// n tokens, each different (as a real conversation's are).
class Words {
 public:
  Words() {
    std::ifstream in(bench::data_dir() / "texts" / "grimms-fairy-tales.txt");
    if (!in) throw std::runtime_error("bench_server: texts/grimms-fairy-tales.txt is missing from the data folder");
    words_.assign(std::istream_iterator<std::string>(in), std::istream_iterator<std::string>());
    at_ = 400;  // past the licence header
  }
  std::string take(std::size_t tokens) {
    std::string s;
    while (tokenizer().encode(s, false).size() < tokens) {
      if (!s.empty()) s += ' ';
      s += words_[at_++ % words_.size()];
    }
    return s;
  }

 private:
  std::vector<std::string> words_;
  std::size_t at_ = 0;
};

// Our server, in this process on a free loopback port, with a Llama of its
// own over the shared weights: two servers alive at once (one kept warm
// across benchmarks, one made afresh) must not run passes in one model's
// scratch space.
class OurServer {
 public:
  OurServer(bool reuse, std::size_t max_sequences) : llama_(model().weights()) {
    serve::ServiceOptions o;
    o.model_name = "tinyllama";
    o.max_sequences = max_sequences;
    o.cache_bytes = reuse ? std::size_t(2048) << 20 : 0;  // 0: no prefix reuse at all
    server::HttpOptions h;
    h.port = 0;
    h.request_timeout = std::chrono::seconds(600);
    service_.emplace(llama_, tokenizer(), o);
    http_.emplace(*service_, h);
    port_ = http_->bind();
    service_->start();
    thread_ = std::thread([this] { http_->run(); });
  }
  ~OurServer() {
    http_->close_listener();
    service_->drain(std::chrono::seconds(5));
    http_->wait_idle(std::chrono::seconds(2));
    http_->stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  Llama<Tiny> llama_;
  std::optional<serve::ApiService> service_;
  std::optional<server::HttpServer<serve::ApiService>> http_;
  int port_ = 0;
  std::thread thread_;
};

struct Answer {
  double ttft_s = 0;  // to the first chunk with text
  std::string text;
  std::int64_t prefilled = -1;    // the server's timings.prompt_n, when it gives them
  double server_prefill_ms = -1;  // the server's timings.prompt_ms, likewise
};

// One streaming chat request; the time to first token is the client's: from
// sending to the first chunk that carries text.
Answer ask(httplib::Client& client, const json& messages, int max_tokens) {
  const json body = {{"model", "tinyllama"}, {"messages", messages}, {"max_tokens", max_tokens},
                     {"temperature", 0},     {"stream", true},       {"stream_options", {{"include_usage", true}}}};
  Answer a;
  std::string buffer;
  const auto start = Clock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    buffer.append(data, n);
    for (std::size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json chunk = json::parse(event.substr(6));
      if (chunk.contains("timings")) {
        a.prefilled = chunk["timings"].value("prompt_n", std::int64_t{-1});
        a.server_prefill_ms = chunk["timings"].value("prompt_ms", -1.0);
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& delta = chunk["choices"][0]["delta"];
      if (!delta.contains("content") || !delta["content"].is_string()) continue;
      const std::string piece = delta["content"];
      if (!piece.empty() && a.text.empty()) a.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
      a.text += piece;
      // An answer whose first token ended it (EOS) has no text: its first
      // token is the end.
      if (a.text.empty() && chunk["choices"][0].contains("finish_reason") && !chunk["choices"][0]["finish_reason"].is_null())
        a.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
    }
    return true;
  };
  const auto res = client.send(req);
  if (!res || res->status != 200)
    throw std::runtime_error("bench_server: the request failed (" +
                             (res ? std::to_string(res->status) : std::string("no answer")) + ")");
  return a;
}

std::optional<std::pair<std::string, int>> peer() {
  const char* v = std::getenv("STREAMLLM_BENCH_PEER");
  if (!v || !*v) return std::nullopt;
  const std::string s(v);
  const auto colon = s.rfind(':');
  return std::make_pair(s.substr(0, colon), std::stoi(s.substr(colon + 1)));
}

// Ten turns whose history reaches about `history` tokens at the last: each
// turn a user message of 30% of its share and an answer of the rest (less
// the template's tags), the answer generated, so with reuse only the user
// message and its tags are new to the server on the next turn. With two
// servers, the same conversation on each, one right after the other (the
// host's speed drifts by tens of percent within minutes), a second apart so
// that neither's work after its last answer (our closing step, its threads'
// spinning) falls into the other's turns; counters of the second are
// prefixed "peer_".
void run_turns(benchmark::State& state, std::span<httplib::Client* const> clients) {
  const auto history = static_cast<std::size_t>(state.range(0));
  const std::size_t share = history / kTurns, user = std::max<std::size_t>(8, share * 3 / 10);
  const int answer = static_cast<int>(share - user - 10);
  const std::size_t servers = clients.size();
  for (httplib::Client* c : clients) c->set_read_timeout(600, 0);
  std::vector<std::vector<double>> ttft(servers);
  std::vector<Answer> last(servers);
  static int conversations = 0;
  for (auto _ : state) {
    // A system prompt of this conversation's own: nothing of an earlier
    // one (another history size, or a repetition) is a prefix of it but the
    // template's start.
    const json system = {{"role", "system"},
                         {"content", std::to_string(history) + " tokens of history, conversation " +
                                         std::to_string(++conversations) + ": you are a storyteller who answers briefly."}};
    std::vector<json> messages(servers, json::array({system}));
    Words words;
    double total = 0;
    std::vector<std::string> questions;
    for (int t = 0; t < kTurns; ++t) questions.push_back(words.take(user));
    for (std::size_t s = 0; s < servers; ++s) {
      if (s > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
      ttft[s].clear();
      for (const std::string& question : questions) {
        messages[s].push_back({{"role", "user"}, {"content", question}});
        last[s] = ask(*clients[s], messages[s], answer);
        messages[s].push_back({{"role", "assistant"}, {"content", last[s].text}});
        ttft[s].push_back(last[s].ttft_s);
      }
    }
    for (double t : ttft[0]) total += t;
    state.SetIterationTime(total);
  }
  for (std::size_t s = 0; s < servers; ++s) {
    const std::string prefix = s == 0 ? "" : "peer_";
    for (int t = 0; t < kTurns; ++t)
      state.counters[prefix + "t" + std::to_string(t + 1) + "_ms"] = 1e3 * ttft[s][static_cast<std::size_t>(t)];
    state.counters[prefix + "t10/t1"] = ttft[s].back() / ttft[s].front();
    state.counters[prefix + "t10_prefilled"] = static_cast<double>(last[s].prefilled);
    state.counters[prefix + "t10_server_prefill_ms"] = last[s].server_prefill_ms;
  }
  if (servers == 2) {
    int not_slower = 0;
    for (int t = 0; t < kTurns; ++t) not_slower += ttft[0][static_cast<std::size_t>(t)] <= ttft[1][static_cast<std::size_t>(t)];
    state.counters["turns_not_slower"] = not_slower;
  }
}

OurServer& reusing_server() {
  static OurServer srv(true, 8);
  return srv;
}

// args: history tokens at turn 10, prefix reuse (0/1). With reuse, one
// server serves every history in turn, as a peer running beside this
// benchmark does (each conversation starts with the same system prompt).
void chat_turns(benchmark::State& state) {
  omp_set_num_threads(2);
  model();  // first: statics end in reverse, the server before the model it serves
  std::optional<OurServer> fresh;
  OurServer& srv = state.range(1) != 0 ? reusing_server() : fresh.emplace(false, 8);
  httplib::Client client("127.0.0.1", srv.port());
  httplib::Client* const clients[] = {&client};
  run_turns(state, clients);
}

// args: history tokens at turn 10. Ours with reuse, then the server named
// by STREAMLLM_BENCH_PEER, the same conversation on each.
void chat_turns_peer(benchmark::State& state) {
  model_path();  // written (and its path printed) for the peer to load
  const auto p = peer();
  if (!p) {
    state.SkipWithError("set STREAMLLM_BENCH_PEER=host:port to measure another server on the same turns");
    for (auto _ : state) {}
    return;
  }
  omp_set_num_threads(2);
  model();
  httplib::Client ours("127.0.0.1", reusing_server().port()), theirs(p->first, p->second);
  httplib::Client* const clients[] = {&ours, &theirs};
  run_turns(state, clients);
}

// args: sharing (0/1). 16 clients at once, each a 500-token system prompt
// (the same for all) and a question of its own; TTFT of each.
void shared_system_prompt(benchmark::State& state) {
  constexpr int kClients = 16;
  omp_set_num_threads(2);
  Words words;
  const std::string system = words.take(500);
  std::vector<std::string> questions;
  for (int c = 0; c < kClients; ++c) questions.push_back(words.take(20));
  std::vector<double> ttft;
  for (auto _ : state) {
    OurServer srv(state.range(0) != 0, kClients);
    ttft.assign(kClients, 0);
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c)
      threads.emplace_back([&, c] {
        httplib::Client client("127.0.0.1", srv.port());
        client.set_read_timeout(600, 0);
        const json messages =
            json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", questions[c]}}});
        ttft[static_cast<std::size_t>(c)] = ask(client, messages, 8).ttft_s;
      });
    for (auto& t : threads) t.join();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  double sum = 0;
  for (double t : ttft) sum += t;
  state.counters["ttft_mean_ms"] = 1e3 * sum / kClients;
  state.counters["ttft_max_ms"] = 1e3 * *std::max_element(ttft.begin(), ttft.end());
  state.counters["prompt_tok"] = static_cast<double>(tokenizer().encode(system, false).size());
}

}  // namespace

BENCHMARK(chat_turns)
    ->ArgsProduct({{250, 500, 1000, 2000}, {1, 0}})
    ->ArgNames({"history", "reuse"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(chat_turns_peer)
    ->Arg(250)
    ->Arg(500)
    ->Arg(1000)
    ->Arg(2000)
    ->ArgNames({"history"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(shared_system_prompt)
    ->Arg(1)
    ->Arg(0)
    ->ArgNames({"sharing"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK_MAIN();
