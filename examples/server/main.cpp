// server: an OpenAI-style completion server over continuous batching, on a
// loopback port by default.
//
//   server --model stories260K.bin --port 8080
//   curl -N localhost:8080/v1/completions -d '{"prompt": "Once upon a time", "max_tokens": 60, "stream": true}'
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>

#include "common/example_support.hpp"
#include "common/preset_models.hpp"
#include "server.hpp"

namespace {
std::function<void()> stop_server;
void on_signal(int) {
  if (stop_server) stop_server();
}
}  // namespace

int main(int argc, char** argv) {
  server::Options o;
  std::string model = examples::default_model(), tokenizer;
  int threads = 0;
  CLI::App app{"OpenAI-style completion server (POST /v1/completions, /v1/chat/completions; GET /health)."};
  app.add_option("-m,--model", model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option("-z,--tokenizer", tokenizer, "SentencePiece .model or GGUF (default: the GGUF model's own, or from the data folder)");
  app.add_option("--host", o.host, "address to listen on (loopback by default)")->capture_default_str();
  app.add_option("-p,--port", o.port, "port (0: any free port, printed at start)")->capture_default_str();
  app.add_option("--max-sequences", o.max_sequences, "sequences decoded together in one batch")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-waiting", o.max_waiting, "requests queued behind them; more get 429")->capture_default_str();
  app.add_option("--step-tokens", o.step_tokens, "tokens per batched step (decodes, then prompt chunks)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--sinks", o.sinks, "attention sinks of each request's cache")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "window of each request's sink+window cache (0: a dense cache)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--max-tokens", o.default_max_tokens, "default max_tokens of a request")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-j,--threads", threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (model.empty()) throw streamllm::Error("no --model given and no data folder found (set STREAMLLM_DATA_DIR)");
    examples::set_threads(threads);
    const auto info = streamllm::read_model_info(model);
    if (tokenizer.empty()) tokenizer = examples::default_tokenizer(model, info);
    o.model_name = std::filesystem::path(model).filename().string();
    return streamllm::with_preset(
        info.shape,
        [&](auto config) {
          using Config = decltype(config);
          const auto tok = streamllm::Tokenizer::load(tokenizer);
          auto llama = streamllm::load_llama<Config>(model);
          server::CompletionServer<Config> srv(llama, tok, o);
          const int port = srv.bind();
          std::printf("listening on http://%s:%d (%s, %zu sequences per batch)\n", o.host.c_str(), port, o.model_name.c_str(),
                      o.max_sequences);
          std::fflush(stdout);
          stop_server = [&srv] { srv.stop(); };
          std::signal(SIGINT, on_signal);
          std::signal(SIGTERM, on_signal);
          srv.serve();
          return 0;
        },
        info.format == streamllm::ModelFormat::Llama2c);
  } catch (const streamllm::Error& e) {
    std::fprintf(stderr, "server: %s\n", e.what());
    return 1;
  }
}
