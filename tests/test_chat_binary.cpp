// examples/chat driven through stdin, as a script would: two turns, /stats,
// /reset. Its streamed answers must be the library's, and its stats true.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cache_types.hpp"
#include "common.hpp"
#include "streamllm/generation/chat.hpp"

using namespace streamllm;
using test::Stories;

TEST_CASE("the chat binary streams the session's answers and reports its stats", "[chat][binary]") {
  const auto dir = std::filesystem::temp_directory_path() / ("streamllm-chat-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "in.txt", out = dir / "out.txt";
  std::ofstream(in) << "Hello, who are you?\n/stats\nTell me a story about a cat.\n/stats\n/reset\n/stats\n/quit\n";
  const std::string cmd = std::string(STREAMLLM_CHAT_BINARY) + " --model " + test::model_path("stories260K.bin") +
                          " --tokenizer " + test::model_path("tok512.model") +
                          " --system 'You are a storyteller.' --sinks 4 --window 60 -n 40 < " + in.string() + " > " +
                          out.string() + " 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::stringstream got;
  got << std::ifstream(out).rdbuf();
  const std::string text = got.str();

  // The same conversation through the library, in the chat binary's default cache types.
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  const Tokenizer tok(test::model_path("tok512.model"));
  ChatSession<Stories> chat(model, tok, std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 60, examples::kChatCacheTypes),
                            "You are a storyteller.");
  GenerationOptions opt;
  opt.max_new_tokens = 40;
  chat.ask("Hello, who are you?", opt, nullptr);
  const std::size_t after1 = chat.history_tokens();
  chat.ask("Tell me a story about a cat.", opt, nullptr);
  const std::size_t after2 = chat.history_tokens();
  const std::string a1 = chat.turns()[0].answer_text, a2 = chat.turns()[1].answer_text;
  REQUIRE_FALSE(a1.empty());

  const std::string expected_start = "> Hello, who are you?\n" + a1 + "\n\n> /stats\n[stats] history: " + std::to_string(after1) +
                                     " tokens in 1 turns\n[stats] cache: sink+window KV cache (4 sinks + 60 window, K q8_0, V q8_0), " +
                                     std::to_string(std::min<std::size_t>(after1, 64)) + " of 64 positions used";
  REQUIRE(text.rfind(expected_start, 0) == 0);
  REQUIRE_THAT(text, Catch::Contains("> Tell me a story about a cat.\n" + a2 +
                                     "\n\n> /stats\n[stats] history: " + std::to_string(after2) + " tokens in 2 turns"));
  REQUIRE_THAT(text, Catch::Contains("prefilled " + std::to_string(chat.turns()[1].prompt.size()) + ", time to first token"));
  REQUIRE_THAT(text, Catch::Contains("> /reset\n[conversation reset]\n> /stats\n[stats] history: 0 tokens in 0 turns"));
  std::filesystem::remove_all(dir);
}
