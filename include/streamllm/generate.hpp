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

// Generates after `prompt` (ids, BOS included), appending to `cache`. The
// last sampled token is not fed to the model (nothing would read its logits),
// so on return the cache holds the prompt and all generated tokens but the last.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                          std::span<const TokenId> prompt, const GenerationOptions& opt,
                          const TextCallback& on_text) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (opt.max_new_tokens < 0) throw InputError("generate: max_new_tokens must be >= 0");
  if (tok.vocab_size() != Config::Vocab)
    throw InputError("generate: tokenizer '" + tok.source() + "' has " + std::to_string(tok.vocab_size()) +
                     " pieces, the model " + std::to_string(Config::Vocab));
  Sampler sampler(opt.sampling);
  GenerationResult res;
  res.prompt_tokens = prompt.size();
  res.tokens.reserve(static_cast<std::size_t>(opt.max_new_tokens));
  StreamingDetokenizer detok(tok);
  std::vector<TokenId> history;
  history.reserve(prompt.size() + static_cast<std::size_t>(opt.max_new_tokens));
  history.assign(prompt.begin(), prompt.end());
  auto emit = [&](std::string_view piece) { return piece.empty() || !on_text || on_text(piece); };
  auto is_stop = [&](TokenId t) {
    if (opt.stop_at_eos && t == tok.eos()) return true;
    for (TokenId s : opt.stop_tokens)
      if (s == t) return true;
    return false;
  };

  const auto t0 = Clock::now();
  std::span<const float> logits = model.prefill(prompt, cache);
  const auto t_prefill = Clock::now();
  res.prefill_s = seconds(t0, t_prefill);
  for (TokenId id : prompt) {  // the detokeniser must know the text so far
    const std::string_view piece = detok.push(id);
    if (opt.echo_prompt && !emit(piece)) {
      res.stop = StopReason::Callback;
      return res;
    }
  }

  Clock::time_point t_first = t_prefill;
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const TokenId next = sampler.sample(logits, history);
    if (i == 0) {
      t_first = Clock::now();
      res.time_to_first_token_s = seconds(t0, t_first);
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

// The same after a text prompt, encoded with BOS.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                          std::string_view prompt, const GenerationOptions& opt, const TextCallback& on_text) {
  const std::vector<TokenId> ids = tok.encode(prompt, true);
  return generate(model, tok, cache, std::span<const TokenId>(ids), opt, on_text);
}

}  // namespace streamllm
