// generate: stream a continuation of a prompt from a llama2.c checkpoint.
//
//   generate --model stories260K.bin --tokenizer tok512.model --prompt "Once upon a time" -n 200
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "common/cache_types.hpp"
#include "common/example_support.hpp"
#include "common/model_job.hpp"
#include "streamllm/streamllm.hpp"

namespace {

struct Options {
  std::string model = examples::default_model();
  std::string tokenizer;
  std::string prompt = "Once upon a time";
  int tokens = 256;
  float temperature = 0.0f;
  float top_p = 0.9f;
  int top_k = 0;
  float repetition_penalty = 1.0f;
  std::uint64_t seed = 0;
  int threads = 0;
  int sinks = 4;
  int window = 0;  // > 0: a sink+window cache, generation without end in fixed memory
  bool ignore_eos = false;
  examples::CacheTypeOptions cache_types;
};

template <class Config>
int run(const Options& o, streamllm::Llama<Config>& model) {
  const auto tok = streamllm::Tokenizer::load(o.tokenizer);
  std::unique_ptr<streamllm::KVCacheBase<Config>> cache;
  if (o.window > 0)
    cache = std::make_unique<streamllm::DynamicSinkWindowKVCache<Config>>(o.sinks, o.window, o.cache_types.types(Config::KVDim));
  else
    cache = std::make_unique<streamllm::DynamicKVCache<Config>>(Config::MaxSeq, o.cache_types.types(Config::KVDim));

  streamllm::GenerationOptions opt;
  opt.max_new_tokens = o.tokens;
  opt.echo_prompt = true;
  opt.sampling.temperature = o.temperature;
  opt.sampling.top_p = o.top_p;
  opt.sampling.top_k = o.top_k;
  opt.sampling.repetition_penalty = o.repetition_penalty;
  opt.sampling.seed = o.seed;
  opt.stop_at_eos = !o.ignore_eos;

  std::fprintf(stderr, "model %s (%s), tokenizer %s, %s, %d threads, kernels %s (portable: %s; F16 and BF16 prefill in %s tiles)\n",
               o.model.c_str(), Config::shape().to_string().c_str(), o.tokenizer.c_str(), cache->describe().c_str(),
               omp_get_max_threads(), streamllm::kernels::to_string(streamllm::kernels::active_isa()),
               streamllm::kernels::portable::arch_name(), streamllm::kernels::bf16_tiles() ? "bf16" : "f32");
  const auto res = streamllm::generate(model, tok, *cache, std::string_view(o.prompt), opt, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  std::fflush(stdout);  // the text's last line before the stats, also when both go to one terminal
  std::fprintf(stderr,
               "prompt %zu tokens, generated %zu (%s); time to first token %.1f ms, prefill %.1f ms, "
               "decode %.1f tok/s\n",
               res.prompt_tokens, res.tokens.size(), streamllm::to_string(res.stop), 1e3 * res.time_to_first_token_s,
               1e3 * res.prefill_s, res.tokens_per_s());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Stream a continuation of a prompt from a Llama-architecture model (llama2.c .bin or GGUF)."};
  app.add_option("-m,--model", o.model, "model file (llama2.c .bin or GGUF)")->capture_default_str();
  app.add_option(
      "-z,--tokenizer", o.tokenizer,
      "SentencePiece .model or GGUF (default: the GGUF model's own; for .bin, from the data folder by vocabulary size)");
  app.add_option("-i,--prompt", o.prompt, "prompt text")->capture_default_str();
  app.add_option("-n,--tokens", o.tokens, "tokens to generate at most (-1: no limit, with --window)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 30));
  app.add_option("-t,--temperature", o.temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("-p,--top-p", o.top_p, "nucleus sampling mass")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  app.add_option("-k,--top-k", o.top_k, "keep the k most likely tokens, 0 = all")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("-r,--repetition-penalty", o.repetition_penalty, "CTRL repetition penalty, 1 = off")->capture_default_str();
  app.add_option("-s,--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("-j,--threads", o.threads, "OpenMP threads, 0 = all cores")->capture_default_str();
  app.add_option("--sinks", o.sinks, "attention sinks of a sink+window cache")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--window", o.window, "window of a sink+window cache (StreamingLLM: fixed memory, no end); 0: dense")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  examples::add_cache_type_options(app, o.cache_types, {});
  app.add_flag("--ignore-eos", o.ignore_eos, "go on past the end-of-sequence token");
  CLI11_PARSE(app, argc, argv);
  if (o.tokens < 0 && o.window == 0) {
    std::fprintf(stderr, "generate: -n -1 (no limit) needs a sink+window cache (--window W): a dense cache fills up\n");
    return 1;
  }

  return examples::report_failures("generate", [&] {
    if (o.model.empty()) throw streamllm::Error("no --model given and no data folder found (set STREAMLLM_DATA_DIR)");
    examples::set_threads(o.threads);
    const auto info = streamllm::read_model_info(o.model);
    if (o.tokenizer.empty()) o.tokenizer = examples::default_tokenizer(o.model, info);
    return examples::with_model(argc, argv, o.model, info, [&](auto& model) { return run(o, model); });
  });
}
