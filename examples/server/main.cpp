// server: an OpenAI-compatible server over continuous batching, on a
// loopback port by default. Conversations continue from their KV cache
// across requests (--cache-mib, --cache-dir); SIGINT / SIGTERM stop it
// gracefully (every stream ends with its final event and [DONE]).
//
//   server --model stories260K.bin --port 8080
//   curl -N localhost:8080/v1/chat/completions -H 'Content-Type: application/json'
//        -d '{"messages": [{"role": "user", "content": "Hi!"}], "stream": true}'   (one line)
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "common/cache_types.hpp"
#include "common/example_support.hpp"
#include "common/model_job.hpp"
#include "http_server.hpp"
#include "streamllm/serve/api_service.hpp"

namespace {

bool loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

}  // namespace

int main(int argc, char** argv) {
  streamllm::serve::ServiceOptions o;
  server::HttpOptions h;
  std::string model = examples::default_model(), tokenizer;
  int threads = 0;
  double cache_mib = 512, cache_dir_mib = 4096, max_body_mib = 4, request_timeout_s = 10, shutdown_timeout_s = 10;
  CLI::App app{
      "OpenAI-compatible server: /v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize, "
      "/health, /metrics."};
  app.add_option("-m,--model", model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option("-z,--tokenizer", tokenizer,
                 "SentencePiece .model or GGUF (default: the GGUF model's own, or from the data folder)");
  app.add_option("--alias", o.model_name, "the model's name in the API (default: the file's name)");
  app.add_option("--chat-template", o.chat_template,
                 "chat format instead of the model file's: " + streamllm::ChatTemplate::names_list());
  app.add_option("--host", h.host, "address to listen on (loopback by default)")->capture_default_str();
  app.add_option("-p,--port", h.port, "port (0: any free port, printed at start)")->capture_default_str();
  app.add_option("--max-sequences", o.max_sequences, "sequences decoded together in one batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-waiting", o.max_waiting, "requests queued behind them; more get 429")->capture_default_str();
  app.add_option("--step-tokens", o.step_tokens, "tokens per batched step (decodes, then prompt chunks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--close-wait-ms", o.close_wait_ms,
                 "how long an answer's last tokens wait to go into its cache with the next forward or the next turn")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sinks", o.sinks, "attention sinks of each conversation's cache")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "window of each conversation's sink+window cache (0: a dense cache)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  examples::CacheTypeOptions cache_types;
  examples::add_cache_type_options(app, cache_types, examples::kChatCacheTypes);
  app.add_option("--max-tokens", o.default_max_tokens, "max_tokens of a request that gives none")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cache-mib", cache_mib, "memory for caches kept for reuse (0: no prefix reuse)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cache-dir", o.cache_dir, "folder for caches evicted from memory and kept over restarts");
  app.add_option("--cache-dir-mib", cache_dir_mib, "disk for --cache-dir, oldest removed first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (all but /health)");
  app.add_option("--cors-origin", o.cors_origin, "allow this browser origin ('*': any); off by default");
  app.add_option("--max-body-mib", max_body_mib, "largest request body (413 beyond)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--request-timeout", request_timeout_s, "seconds a client has to send a whole request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--shutdown-timeout", shutdown_timeout_s, "seconds running generations get to finish at SIGTERM")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--io-threads", h.io_threads, "threads for the network (generation runs on its own)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("-j,--threads", threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  // SIGINT / SIGTERM are taken by a thread of ours (sigwait), not a handler:
  // shutting down is far from async-signal-safe.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  return examples::report_failures("server", [&] {
    if (model.empty()) throw streamllm::Error("no --model given and no data folder found (set STREAMLLM_DATA_DIR)");
    examples::set_threads(threads);
    const auto info = streamllm::read_model_info(model);
    if (tokenizer.empty()) tokenizer = examples::default_tokenizer(model, info);
    if (o.model_name == "streamllm") o.model_name = std::filesystem::path(model).filename().string();
    o.cache_bytes = static_cast<std::size_t>(cache_mib * (1 << 20));
    // A rank holds its slice of the KV heads (the width its caches' rows have).
    const auto kv_width = info.shape.kv_heads * (info.shape.dim / std::max<std::int64_t>(info.shape.heads, 1)) /
                          std::max(examples::launched_ranks(), 1);
    o.cache_types = cache_types.types(static_cast<std::size_t>(kv_width));
    o.cache_dir_bytes = static_cast<std::uintmax_t>(cache_dir_mib * (1 << 20));
    o.loopback_hosts_only = loopback(h.host);
    o.warn = [](const std::string& w) { std::fprintf(stderr, "server: warning: %s\n", w.c_str()); };
    h.max_body_bytes = static_cast<std::size_t>(max_body_mib * (1 << 20));
    h.request_timeout = std::chrono::milliseconds(static_cast<long long>(request_timeout_s * 1000));
    if (!loopback(h.host) && o.api_key.empty())
      std::fprintf(stderr,
                   "server: warning: listening on %s beyond loopback without --api-key: anyone who reaches "
                   "this port can run the model\n",
                   h.host.c_str());
    if (examples::launched_ranks() > 1 && !o.cache_dir.empty())
      throw streamllm::Error(
          "--cache-dir: a model split across processes keeps its caches in memory only (each rank holds a part "
          "of every cache, and the files hold one process's); run without --cache-dir");
    return examples::with_model(argc, argv, model, info, [&](auto& llama) {
      const auto tok = streamllm::Tokenizer::load(tokenizer);
      streamllm::serve::ApiService service(llama, tok, o);
      std::fprintf(stderr, "server: %s\n", service.chat_template().note().c_str());
      server::HttpServer<streamllm::serve::ApiService> http(service, h);
      const int port = http.bind();
      service.start();
      std::printf("listening on http://%s:%d (%s, %zu sequences per batch, %s caches of %s, %.0f MiB kept for reuse)\n",
                  h.host.c_str(), port, o.model_name.c_str(), o.max_sequences, o.window > 0 ? "sink+window" : "dense",
                  streamllm::kv_types_name(o.cache_types).c_str(), cache_mib);
      std::fflush(stdout);
      std::thread shutdown([&] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        std::fprintf(stderr, "server: %s: finishing the requests in progress (up to %.0f s)\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM", shutdown_timeout_s);
        http.close_listener();
        service.drain(std::chrono::milliseconds(static_cast<long long>(shutdown_timeout_s * 1000)));
        http.wait_idle(std::chrono::seconds(2));
        http.stop();
      });
      http.run();
      shutdown.join();
      std::fprintf(stderr, "server: stopped\n");
      return 0;
    });
  });
}
