// Generation with streaming: prefill the prompt, then sample and decode one
// token at a time, handing each piece of text to the caller the moment it is
// valid UTF-8.
#pragma once

#include <chrono>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/detokenizer.hpp"
#include "streamllm/model.hpp"
#include "streamllm/sampler.hpp"
#include "streamllm/tokenizer.hpp"

namespace streamllm {

enum class StopReason { EndOfSequence, MaxTokens, Callback, CacheFull };

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::EndOfSequence: return "end of sequence";
    case StopReason::MaxTokens: return "token limit";
    case StopReason::Callback: return "stopped by caller";
    case StopReason::CacheFull: return "cache full";
  }
  return "?";
}

struct GenerationOptions {
  int max_new_tokens = 256;
  SamplingParams sampling;
  bool echo_prompt = false;           // stream the prompt's text first
  // The generated text continues the prompt's (a completion): spaces at the
  // join are kept. false: it is a text of its own (a chat answer), whose
  // first leading space is dropped as decode of the answer alone would.
  bool continue_text = true;
  // Called as the prompt's chunks are prefilled: (tokens done, tokens in all).
  std::function<void(std::size_t, std::size_t)> on_prefill_progress;
  std::vector<TokenId> stop_tokens;   // besides EOS when stop_at_eos
  bool stop_at_eos = true;
};

struct GenerationResult {
  std::vector<TokenId> tokens;  // generated ids (a stop token included)
  std::size_t prompt_tokens = 0;
  StopReason stop = StopReason::MaxTokens;
  double time_to_first_token_s = 0;  // call start to first generated token
  double prefill_s = 0;
  double decode_s = 0;               // first to last generated token
  // Decode speed: tokens after the first, over the time they took.
  double tokens_per_s() const {
    return tokens.size() > 1 && decode_s > 0 ? static_cast<double>(tokens.size() - 1) / decode_s : 0.0;
  }
};

// Receives each piece of text; returns false to stop generation.
using TextCallback = std::function<bool(std::string_view)>;

// Arguments a generation cannot start with, before anything is computed.
template <class Config>
void check_generation(const Tokenizer& tok, const GenerationOptions& opt) {
  if (opt.max_new_tokens < 0) throw InputError("generate: max_new_tokens must be >= 0");
  if (tok.vocab_size() != Config::Vocab)
    throw InputError("generate: tokenizer '" + tok.source() + "' has " + std::to_string(tok.vocab_size()) +
                     " pieces, the model " + std::to_string(Config::Vocab));
  opt.sampling.validate();
}

// Generates from `logits`, the model's output after the caller fed `context`
// (the tokens so far, for the repetition penalty and the detokeniser) into
// `cache`. Sessions that prefill a turn themselves call this; `start` is when
// the caller's request began, for the time to first token.
template <class Config>
GenerationResult generate_from(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                               std::span<const float> logits, std::span<const TokenId> context,
                               const GenerationOptions& opt, const TextCallback& on_text,
                               std::chrono::steady_clock::time_point start) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  check_generation<Config>(tok, opt);
  Sampler sampler(opt.sampling);
  GenerationResult res;
  res.prompt_tokens = context.size();
  res.tokens.reserve(static_cast<std::size_t>(opt.max_new_tokens));
  StreamingDetokenizer detok(tok);
  std::vector<TokenId> history;
  history.reserve(context.size() + static_cast<std::size_t>(opt.max_new_tokens));
  history.assign(context.begin(), context.end());
  auto emit = [&](std::string_view piece) { return piece.empty() || !on_text || on_text(piece); };
  auto is_stop = [&](TokenId t) {
    if (opt.stop_at_eos && t == tok.eos()) return true;
    for (TokenId s : opt.stop_tokens)
      if (s == t) return true;
    return false;
  };

  if (opt.echo_prompt || opt.continue_text) {
    for (TokenId id : context) {  // the detokeniser must know the text so far
      const std::string_view piece = detok.push(id);
      if (opt.echo_prompt && !emit(piece)) {
        res.stop = StopReason::Callback;
        return res;
      }
    }
  }

  Clock::time_point t_first = Clock::now();
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const TokenId next = sampler.sample(logits, history);
    if (i == 0) {
      t_first = Clock::now();
      res.time_to_first_token_s = seconds(start, t_first);
    }
    res.tokens.push_back(next);
    history.push_back(next);
    if (is_stop(next)) {
      res.stop = StopReason::EndOfSequence;
      break;
    }
    if (!emit(detok.push(next))) {
      res.stop = StopReason::Callback;
      break;
    }
    if (i + 1 == opt.max_new_tokens) {
      res.stop = StopReason::MaxTokens;
      break;
    }
    if (!cache.has_room(1)) {
      res.stop = StopReason::CacheFull;
      break;
    }
    logits = model.decode(next, cache);
  }
  if (res.stop != StopReason::Callback) emit(detok.finish());
  res.decode_s = seconds(t_first, Clock::now());
  return res;
}

// Generates after `prompt` (ids, BOS included), appending to `cache`. The
// last sampled token is not fed to the model (nothing would read its logits),
// so on return the cache holds the prompt and all generated tokens but the last.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                          std::span<const TokenId> prompt, const GenerationOptions& opt,
                          const TextCallback& on_text) {
  const auto t0 = std::chrono::steady_clock::now();
  check_generation<Config>(tok, opt);
  const std::span<const float> logits = model.prefill(prompt, cache, opt.on_prefill_progress);
  const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GenerationResult res = generate_from(model, tok, cache, logits, prompt, opt, on_text, t0);
  res.prefill_s = prefill_s;
  return res;
}

// The same after a text prompt, encoded with BOS.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                          std::string_view prompt, const GenerationOptions& opt, const TextCallback& on_text) {
  const std::vector<TokenId> ids = tok.encode(prompt, true);
  return generate(model, tok, cache, std::span<const TokenId>(ids), opt, on_text);
}

}  // namespace streamllm
