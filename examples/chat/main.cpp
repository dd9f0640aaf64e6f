// chat: a conversation with a Llama 2 model on the terminal, or line by line
// from stdin when stdin is not a terminal (so scripts and tests can drive it).
// Each answer streams as it is generated; each turn prefills only its own
// tokens. Commands: /reset, /stats, /quit.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "common/example_support.hpp"
#include "common/preset_models.hpp"
#include "streamllm/streamllm.hpp"

namespace {

struct Options {
  std::string model = examples::default_model();
  std::string tokenizer;
  std::string system;
  float temperature = 0.0f;
  float top_p = 0.9f;
  std::uint64_t seed = 0;
  int sinks = 4;
  int window = 0;  // 0: as large as the model's context allows
  bool dense = false;
  int threads = 0;
  int max_tokens = 256;
};

// "\rloading model  45%" on stderr, for things that take a while.
void progress(const char* what, std::size_t done, std::size_t total) {
  std::fprintf(stderr, "\r%s %3d%%", what, static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)));
  if (done == total) std::fprintf(stderr, "\r%*s\r", 40, "");
  std::fflush(stderr);
}

template <class Config>
void print_stats(const streamllm::ChatSession<Config>& chat) {
  const auto& c = chat.cache();
  const auto& t = chat.last_turn();
  std::printf("[stats] history: %zu tokens in %zu turns\n", chat.history_tokens(), chat.turns().size());
  std::printf("[stats] cache: %s, %lld of %lld positions used, %.2f MiB\n", c.describe().c_str(),
              static_cast<long long>(c.occupancy()), static_cast<long long>(c.capacity()),
              static_cast<double>(c.bytes()) / (1 << 20));
  std::printf("[stats] last answer: %zu tokens (%s), prefilled %zu, time to first token %.1f ms, %.1f tok/s\n",
              t.answer_tokens, streamllm::to_string(t.stop), t.prefilled, 1e3 * t.time_to_first_token_s,
              t.tokens_per_s);
}

template <class Config>
int run(const Options& o) {
  const bool terminal = ::isatty(STDIN_FILENO);
  const auto tok = streamllm::Tokenizer::load(o.tokenizer);
  {
    const streamllm::io::MappedFile file(o.model);
    if (file.size() > (std::size_t(64) << 20))
      file.touch_pages([](std::size_t d, std::size_t n) { progress("loading model", d, n); });
  }
  auto model = streamllm::load_llama<Config>(o.model);
  std::unique_ptr<streamllm::KVCacheBase<Config>> cache;
  if (o.dense) {
    cache = std::make_unique<streamllm::KVCache<Config>>();
  } else {
    const int window = o.window > 0 ? o.window : Config::MaxSeq - o.sinks;
    cache = std::make_unique<streamllm::DynamicSinkWindowKVCache<Config>>(o.sinks, window);
  }
  streamllm::ChatSession<Config> chat(model, tok, std::move(cache), o.system);
  chat.set_progress([](std::size_t d, std::size_t n) {
    if (n > 1024) progress("reading your turn", d, n);
  });

  streamllm::GenerationOptions gen;
  gen.max_new_tokens = o.max_tokens;
  gen.sampling.temperature = o.temperature;
  gen.sampling.top_p = o.top_p;
  gen.sampling.seed = o.seed;

  std::fprintf(stderr, "chat with %s (%s), %s; /reset, /stats, /quit\n", o.model.c_str(),
               Config::shape().to_string().c_str(), chat.cache().describe().c_str());
  std::string line;
  while (true) {
    if (terminal) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!terminal) std::printf("> %s\n", line.c_str());
    if (line == "/quit") break;
    if (line == "/reset") {
      chat.reset();
      std::printf("[conversation reset]\n");
      continue;
    }
    if (line == "/stats") {
      print_stats(chat);
      continue;
    }
    if (line.empty()) continue;
    try {
      chat.ask(line, gen, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
      });
      std::printf("\n\n");
    } catch (const streamllm::Error& e) {
      std::printf("\n");
      std::fprintf(stderr, "error: %s\n", e.what());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Chat with a Llama 2 model; the answer streams as it is generated. Commands: /reset, /stats, /quit."};
  app.add_option("-m,--model", o.model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option("-z,--tokenizer", o.tokenizer, "SentencePiece .model or GGUF (default: the GGUF model's own; for .bin, from the data folder by vocabulary size)");
  app.add_option("--system", o.system, "system prompt");
  app.add_option("-t,--temperature", o.temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-p,--top-p", o.top_p, "nucleus sampling mass")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("-s,--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--sinks", o.sinks, "attention-sink tokens kept forever")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "recent tokens kept (0: the model's context minus the sinks)")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--dense", o.dense, "a dense cache of the model's context instead (fills up)");
  app.add_option("-j,--threads", o.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  app.add_option("-n,--max-tokens", o.max_tokens, "tokens per answer at most")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.model.empty()) throw streamllm::Error("no --model given and no data folder found (set STREAMLLM_DATA_DIR)");
    examples::set_threads(o.threads);
    const auto info = streamllm::read_model_info(o.model);
    if (o.tokenizer.empty()) o.tokenizer = examples::default_tokenizer(o.model, info);
    return streamllm::with_preset(info.shape, [&](auto config) { return run<decltype(config)>(o); },
                                  info.format == streamllm::ModelFormat::Llama2c);
  } catch (const streamllm::Error& e) {
    std::fprintf(stderr, "chat: %s\n", e.what());
    return 1;
  }
}
