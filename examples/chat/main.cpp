// chat: a conversation with a Llama-architecture model on the terminal, or line by line
// from stdin when stdin is not a terminal (so scripts and tests can drive it).
// Each answer streams as it is generated; each turn prefills only its own
// tokens. Turns are laid out with the model file's chat template
// (--chat-template NAME overrides it). Commands: /reset, /stats, /quit.
//
// On a terminal the line is edited with libedit (arrows, history); ctrl-C
// during an answer stops it and returns to the prompt with the conversation
// kept (the cut answer is part of it), ctrl-C at the prompt or ctrl-D exits.
#include <CLI/CLI.hpp>
#include <editline/readline.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "common/cache_types.hpp"
#include "common/example_support.hpp"
#include "common/model_job.hpp"
#include "streamllm/streamllm.hpp"

namespace {

struct Options {
  std::string model = examples::default_model();
  std::string tokenizer;
  std::string system;
  std::string chat_template;  // a ChatTemplate name; "" : the model file's
  float temperature = 0.0f;
  float top_p = 0.9f;
  std::uint64_t seed = 0;
  int sinks = 4;
  int window = 0;  // 0: as large as the model's context allows
  bool dense = false;
  int threads = 0;
  int max_tokens = 256;
  examples::CacheTypeOptions cache_types;
};

// ctrl-C during an answer sets `interrupted`, which its callback reads; at
// the prompt it ends the program (from the handler: a ctrl-C that comes
// before libedit blocks in read() would otherwise be lost), leaving the
// terminal in the mode the user had.
volatile sig_atomic_t interrupted = 0, at_prompt = 0;
termios user_mode{};

void on_interrupt(int) {
  if (at_prompt) {
    ::tcsetattr(STDIN_FILENO, TCSANOW, &user_mode);  // async-signal-safe, as are write and _exit
    const char nl = '\n';
    [[maybe_unused]] const auto n = ::write(STDOUT_FILENO, &nl, 1);
    ::_exit(0);
  }
  interrupted = 1;
}

// While the chat runs, the terminal keeps the output a ctrl-C interrupts
// (NOFLSH): by default it discards what the program wrote and the screen has
// not yet shown, and the user would not see the last words of a cut answer
// that stay in the conversation. SA_RESTART: a ctrl-C must not cut the
// write of the piece being shown (at the prompt the handler exits anyway).
class TerminalForChat {
 public:
  TerminalForChat() {
    ::tcgetattr(STDIN_FILENO, &user_mode);
    termios chat_mode = user_mode;
    chat_mode.c_lflag |= NOFLSH;
    ::tcsetattr(STDIN_FILENO, TCSANOW, &chat_mode);
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
  }
  ~TerminalForChat() { ::tcsetattr(STDIN_FILENO, TCSANOW, &user_mode); }
  TerminalForChat(const TerminalForChat&) = delete;
  TerminalForChat& operator=(const TerminalForChat&) = delete;
};

// The next line: from libedit on a terminal, else from stdin. nullopt at
// the end (ctrl-D, end of input, ctrl-C at the prompt).
std::optional<std::string> next_line(bool terminal) {
  if (!terminal) {
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    std::printf("> %s\n", line.c_str());
    return line;
  }
  std::fflush(stdout);
  at_prompt = 1;
  char* raw = readline("> ");
  at_prompt = 0;
  if (!raw) {
    std::printf("\n");  // ctrl-D: the shell's prompt on a line of its own
    return std::nullopt;
  }
  std::string line(raw);
  std::free(raw);
  if (!line.empty()) add_history(line.c_str());
  return line;
}

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
  std::printf("[stats] last answer: %zu tokens (%s), prefilled %zu, time to first token %.1f ms, %.1f tok/s\n", t.answer_tokens,
              streamllm::to_string(t.stop), t.prefilled, 1e3 * t.time_to_first_token_s, t.tokens_per_s);
}

template <class Config>
int run(const Options& o, streamllm::Llama<Config>& model) {
  const bool terminal = ::isatty(STDIN_FILENO);
  const auto tok = streamllm::Tokenizer::load(o.tokenizer);
  std::unique_ptr<streamllm::KVCacheBase<Config>> cache;
  if (o.dense) {
    cache = std::make_unique<streamllm::DynamicKVCache<Config>>(Config::MaxSeq, o.cache_types.types(Config::KVDim));
  } else {
    const int window = o.window > 0 ? o.window : Config::MaxSeq - o.sinks;
    cache = std::make_unique<streamllm::DynamicSinkWindowKVCache<Config>>(o.sinks, window, o.cache_types.types(Config::KVDim));
  }
  const auto format = streamllm::ChatTemplate::for_model(tok, o.chat_template);
  std::fprintf(stderr, "%s\n", format.note().c_str());
  streamllm::ChatSession<Config> chat(model, tok, std::move(cache), o.system, format);
  chat.set_progress([](std::size_t d, std::size_t n) {
    if (n > 1024) progress("reading your turn", d, n);
  });

  streamllm::GenerationOptions gen;
  gen.max_new_tokens = o.max_tokens;
  gen.sampling.temperature = o.temperature;
  gen.sampling.top_p = o.top_p;
  gen.sampling.seed = o.seed;

  std::fprintf(stderr, "chat with %s (%s), %s; /reset, /stats, /quit\n", o.model.c_str(), Config::shape().to_string().c_str(),
               chat.cache().describe().c_str());
  std::optional<TerminalForChat> chat_terminal;
  if (terminal) chat_terminal.emplace();
  while (true) {
    const auto next = next_line(terminal);
    if (!next) break;
    const std::string& line = *next;
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
      interrupted = 0;
      const auto stats = chat.ask(line, gen, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return !interrupted;  // ctrl-C: the answer ends here, the conversation goes on
      });
      std::printf(stats.stop == streamllm::StopReason::Cancelled ? " [stopped]\n\n" : "\n\n");
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
  CLI::App app{"Chat with a Llama-architecture model; the answer streams as it is generated. Commands: /reset, /stats, /quit."};
  app.add_option("-m,--model", o.model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option(
      "-z,--tokenizer", o.tokenizer,
      "SentencePiece .model or GGUF (default: the GGUF model's own; for .bin, from the data folder by vocabulary size)");
  app.add_option("--system", o.system, "system prompt");
  app.add_option("--chat-template", o.chat_template,
                 "chat format instead of the model file's: " + streamllm::ChatTemplate::names_list());
  app.add_option("-t,--temperature", o.temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-p,--top-p", o.top_p, "nucleus sampling mass")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("-s,--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--sinks", o.sinks, "attention-sink tokens kept forever")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "recent tokens kept (0: the model's context minus the sinks)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--dense", o.dense, "a dense cache of the model's context instead (fills up)");
  examples::add_cache_type_options(app, o.cache_types, examples::kChatCacheTypes);
  app.add_option("-j,--threads", o.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  app.add_option("-n,--max-tokens", o.max_tokens, "tokens per answer at most")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  return examples::report_failures("chat", [&] {
    if (o.model.empty()) throw streamllm::Error("no --model given and no data folder found (set STREAMLLM_DATA_DIR)");
    examples::set_threads(o.threads);
    const auto info = streamllm::read_model_info(o.model);
    if (o.tokenizer.empty()) o.tokenizer = examples::default_tokenizer(o.model, info);
    if (examples::launched_ranks() <= 1) {  // (split across processes, each rank reads only its slice)
      const streamllm::formats::MappedFile file(o.model);
      if (file.size() > (std::size_t(64) << 20))
        file.touch_pages([](std::size_t d, std::size_t n) { progress("loading model", d, n); });
    }
    return examples::with_model(argc, argv, o.model, info, [&](auto& model) { return run(o, model); });
  });
}
