// perplexity: teacher-forced perplexity of a long text under three caches of
// the same model: dense (every token, past the trained context too), window
// only (the last C tokens) and sink+window (S sinks + the last C - S tokens,
// StreamingLLM). Prints a table per block of tokens and writes a CSV.
//
//   perplexity --text ../shared/texts/tinystories-valid-excerpt.txt --csv ppl.csv
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/cache_types.hpp"
#include "common/example_support.hpp"
#include "common/model_job.hpp"
#include "streamllm/streamllm.hpp"

namespace {

struct Options {
  std::string model = examples::default_model();
  std::string tokenizer;
  std::string text;
  std::string csv;
  int cache = 256;  // positions of the window-only and sink+window caches
  int sinks = 4;
  int dense_tokens = 2048;  // the dense cache grows with the stream; stop it here
  examples::CacheTypeOptions cache_types;
  int block = 1024;
  long max_tokens = 0;  // 0: the whole text
  int chunk = 256;
  int threads = 0;
};

// The text as the tokenizer should see it: no byte-order mark, LF line ends.
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw streamllm::FileError(path, "cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.rfind("\xef\xbb\xbf", 0) == 0) s.erase(0, 3);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) out += s[i];
  return out;
}

struct ModeResult {
  std::string name;
  std::vector<double> block_nll;  // mean NLL of each block
  std::vector<std::size_t> block_bytes;
  std::size_t tokens = 0;  // tokens scored
};

// Bytes of the positions a cache holds now (a dense cache allocates its
// capacity up front but grows in use with the stream).
template <class Config>
std::size_t used_bytes(const streamllm::KVCacheBase<Config>& c) {
  return c.bytes() / static_cast<std::size_t>(c.capacity()) * static_cast<std::size_t>(c.occupancy());
}

// -log p(ids[p+1] | ids[0..p]) for every p the cache lets us reach, in
// chunked teacher-forced passes.
template <class Config>
ModeResult score(streamllm::Llama<Config>& model, streamllm::KVCacheBase<Config>& cache, const std::string& name,
                 const std::vector<streamllm::TokenId>& ids, std::size_t limit, const Options& o) {
  ModeResult r{name, {}, {}, 0};
  const std::size_t n = std::min(limit, ids.size() - 1);  // positions with a next token
  double block_sum = 0;
  std::size_t in_block = 0;
  for (std::size_t p0 = 0; p0 < n; p0 += static_cast<std::size_t>(o.chunk)) {
    const std::size_t len = std::min(static_cast<std::size_t>(o.chunk), n - p0);
    const typename streamllm::Llama<Config>::Sequence seq{&cache, {ids.data() + p0, len}, true};
    const auto out = model.forward({&seq, 1});
    for (std::size_t i = 0; i < len; ++i) {
      const auto l = out.row(0, i);
      double mx = l[0], z = 0;
      for (float x : l) mx = std::max(mx, double(x));
      for (float x : l) z += std::exp(double(x) - mx);
      block_sum += mx + std::log(z) - l[static_cast<std::size_t>(ids[p0 + i + 1])];
      if (++in_block == static_cast<std::size_t>(o.block)) {
        r.block_nll.push_back(block_sum / static_cast<double>(in_block));
        r.block_bytes.push_back(used_bytes(cache));
        block_sum = 0;
        in_block = 0;
      }
    }
    r.tokens += len;
    if (::isatty(STDERR_FILENO) && (p0 / static_cast<std::size_t>(o.chunk)) % 64 == 0)
      std::fprintf(stderr, "\r%-12s %zu / %zu tokens", name.c_str(), p0 + len, n);
  }
  if (in_block > 0) {
    r.block_nll.push_back(block_sum / static_cast<double>(in_block));
    r.block_bytes.push_back(used_bytes(cache));
  }
  std::fprintf(stderr, "\r%-12s %zu / %zu tokens scored\n", name.c_str(), r.tokens, n);
  return r;
}

template <class Config>
int run(const Options& o, streamllm::Llama<Config>& model) {
  const auto tok = streamllm::Tokenizer::load(o.tokenizer);
  model.set_max_chunk(static_cast<std::size_t>(o.chunk));
  const std::vector<streamllm::TokenId> ids = tok.encode(read_text(o.text), true);
  const std::size_t total =
      o.max_tokens > 0 ? std::min<std::size_t>(static_cast<std::size_t>(o.max_tokens), ids.size() - 1) : ids.size() - 1;
  const streamllm::KVTypes types = o.cache_types.types(Config::KVDim);
  std::fprintf(stderr, "%s: %zu tokens (scoring %zu), blocks of %d, KV cache %s\n", o.text.c_str(), ids.size(), total, o.block,
               streamllm::kv_types_name(types).c_str());

  std::vector<ModeResult> results;
  {
    streamllm::DynamicKVCache<Config> dense(std::min<long>(static_cast<long>(total), o.dense_tokens), types);
    results.push_back(
        score(model, dense, "dense", ids, std::min<std::size_t>(total, static_cast<std::size_t>(o.dense_tokens)), o));
  }
  {
    streamllm::DynamicSinkWindowKVCache<Config> window(0, o.cache, types);
    results.push_back(score(model, window, "window", ids, total, o));
  }
  {
    streamllm::DynamicSinkWindowKVCache<Config> sink(o.sinks, o.cache - o.sinks, types);
    results.push_back(score(model, sink, "sink+window", ids, total, o));
  }

  std::printf("perplexity per block of %d tokens (dense up to %d tokens; window: 0+%d; sink+window: %d+%d; KV cache %s)\n",
              o.block, o.dense_tokens, o.cache, o.sinks, o.cache - o.sinks, streamllm::kv_types_name(types).c_str());
  std::printf("%8s %10s %12s %12s %12s\n", "block", "tokens", "dense", "window", "sink+window");
  std::size_t blocks = 0;
  for (const auto& r : results) blocks = std::max(blocks, r.block_nll.size());
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) throw streamllm::FileError(o.csv, "cannot create");
    csv << "mode,block,first_token,last_token,mean_nll,perplexity,cache_bytes_used\n";
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t first = b * static_cast<std::size_t>(o.block);
    std::printf("%8zu %10zu", b, first);
    for (const auto& r : results) {
      if (b < r.block_nll.size()) {
        std::printf(" %12.3f", std::exp(r.block_nll[b]));
        if (csv.is_open())
          csv << r.name << ',' << b << ',' << first << ',' << std::min(r.tokens, first + static_cast<std::size_t>(o.block)) - 1
              << ',' << r.block_nll[b] << ',' << std::exp(r.block_nll[b]) << ',' << r.block_bytes[b] << '\n';
      } else {
        std::printf(" %12s", "-");
      }
    }
    std::printf("\n");
  }
  for (const auto& r : results) {
    double sum = 0;
    for (std::size_t b = 0; b < r.block_nll.size(); ++b) {
      const std::size_t first = b * static_cast<std::size_t>(o.block);
      sum += r.block_nll[b] * static_cast<double>(std::min<std::size_t>(o.block, r.tokens - first));
    }
    std::printf("%-12s %zu tokens, perplexity %.3f, cache %.2f MiB in use at the end\n", r.name.c_str(), r.tokens,
                std::exp(sum / static_cast<double>(r.tokens)), static_cast<double>(r.block_bytes.back()) / (1 << 20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Teacher-forced perplexity of a long text under dense, window-only and sink+window caches."};
  app.add_option("-m,--model", o.model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option(
      "-z,--tokenizer", o.tokenizer,
      "SentencePiece .model or GGUF (default: the GGUF model's own; for .bin, from the data folder by vocabulary size)");
  app.add_option("--text", o.text, "text file (a UTF-8 BOM is dropped, CRLF becomes LF)")->required();
  app.add_option("--csv", o.csv, "write the per-block figures here");
  app.add_option("--cache", o.cache, "positions of the window-only and sink+window caches")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--sinks", o.sinks, "attention sinks of the sink+window cache")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dense-tokens", o.dense_tokens, "tokens the dense cache is run for (it grows with them)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--block", o.block, "tokens per reported block")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", o.max_tokens, "score at most this many tokens (0: all)")->capture_default_str();
  examples::add_cache_type_options(app, o.cache_types, {});
  app.add_option("--chunk", o.chunk, "tokens per batched pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("-j,--threads", o.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return examples::report_failures("perplexity", [&] {
    if (o.sinks >= o.cache) throw streamllm::InputError("--sinks must be smaller than --cache");
    examples::set_threads(o.threads);
    const auto info = streamllm::read_model_info(o.model);
    if (o.tokenizer.empty()) o.tokenizer = examples::default_tokenizer(o.model, info);
    return examples::with_model(argc, argv, o.model, info, [&](auto& model) { return run(o, model); });
  });
}
