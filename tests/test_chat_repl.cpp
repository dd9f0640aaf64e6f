// examples/chat on a terminal (a pseudo-terminal): ctrl-C in mid-answer keeps
// the conversation (the next answer is a ChatSession's that saw the cut
// answer), arrow keys edit the line, ctrl-C at the prompt and ctrl-D exit.
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "common.hpp"

using namespace streamllm;
using test::Stories;

namespace {

class Terminal {
 public:
  explicit Terminal(std::vector<std::string> args) {
    args.insert(args.begin(), {STREAMLLM_CHAT_BINARY, "--model", test::model_path("stories260K.bin"), "--tokenizer",
                               test::model_path("tok512.model"), "--cache-type-k", "f32", "--cache-type-v", "f32"});
    pid_ = ::forkpty(&fd_, nullptr, nullptr, nullptr);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
  }
  ~Terminal() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(fd_);
  }

  void type(std::string_view keys) { REQUIRE(::write(fd_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size())); }

  // Reads until `until` appears after the end of the last match (what an
  // earlier wait read past its match counts), or the time is up; returns
  // what was shown from that end to this match's.
  std::string wait_for(const std::string& until, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end && seen_.find(until, matched_) == std::string::npos) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      seen_.append(buf, static_cast<std::size_t>(n));
    }
    const std::size_t at = seen_.find(until, matched_);
    INFO("the terminal shows: " << seen_.substr(matched_));
    REQUIRE(at != std::string::npos);
    const std::string shown = seen_.substr(matched_, at + until.size() - matched_);
    matched_ = at + until.size();
    return shown;
  }

  // The prompt, and the line editor reading keys: libedit shows the prompt,
  // then puts the terminal in raw mode (no ICANON); a key typed in between
  // may be lost, as ctrl-D is, which the canonical terminal takes as EOF.
  // (On Linux the master side reports the terminal's modes.)
  void wait_for_prompt(const std::string& prompt = "> ") {
    wait_for(prompt);
    for (int i = 0; i < 1000; ++i) {
      termios mode{};
      if (::tcgetattr(fd_, &mode) == 0 && !(mode.c_lflag & ICANON)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("the line editor did not take the terminal within 10 s of the prompt");
  }

  // The exit status, or -1 if it has not exited within 10 s (then killed).
  int exit_code() {
    int status = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  // Everything shown, with the terminal's line ends made "\n" and without
  // the "^C" the terminal itself echoes where ctrl-C was typed.
  std::string text() const {
    return std::regex_replace(std::regex_replace(seen_, std::regex("\r\n"), "\n"), std::regex("\\^C"), "");
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string seen_;
  std::size_t matched_ = 0;
};

}  // namespace

TEST_CASE("the REPL: ctrl-C stops an answer and keeps the conversation, arrows edit the line", "[chat][binary]") {
  // Answers of up to 2000 tokens in a sink+window cache: the first is cut long before its end.
  Terminal t({"--sinks", "4", "--window", "252", "-n", "2000"});
  t.wait_for_prompt();
  t.type("Tell me a story.\r");
  t.wait_for("Once");  // the answer is streaming
  t.type("\x03");
  t.wait_for(" [stopped]");
  t.wait_for_prompt();
  t.type("/stats\r");
  const std::string stats = t.wait_for("tok/s");
  std::smatch m;
  REQUIRE(std::regex_search(stats, m, std::regex("last answer: ([0-9]+) tokens \\(cancelled\\)")));
  const int cut = std::stoi(m[1]);
  REQUIRE(cut < 2000);
  t.wait_for_prompt();
  // "Tell me abot a cat", seven steps left, a 'u': "Tell me about a cat".
  t.type("Tell me abot a cat\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x1b[D\x1b[Du\r");
  t.wait_for_prompt("\r\n\r\n> ");
  t.type("\x03");  // at the prompt: exit
  REQUIRE(t.exit_code() == 0);

  // The same conversation in the library: the first answer cut where ctrl-C cut it.
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  const Tokenizer tok(test::model_path("tok512.model"));
  ChatSession<Stories> chat(model, tok, std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 252));
  GenerationOptions opt;
  opt.max_new_tokens = cut;
  chat.ask("Tell me a story.", opt, nullptr);
  opt.max_new_tokens = 2000;
  chat.ask("Tell me about a cat", opt, nullptr);
  const std::string shown = t.text();
  REQUIRE_THAT(shown, Catch::Contains(chat.turns()[0].answer_text + " [stopped]"));
  REQUIRE_THAT(shown, Catch::Contains(chat.turns()[1].answer_text + "\n\n> "));
}

TEST_CASE("the REPL: ctrl-D at the prompt exits on a line of its own", "[chat][binary]") {
  Terminal t({"--dense"});
  t.wait_for_prompt();
  t.type("\x04");
  t.wait_for("\n");
  REQUIRE(t.exit_code() == 0);
  REQUIRE(t.text().back() == '\n');
}
