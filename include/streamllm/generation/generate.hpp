// Generation with streaming: prefill the prompt, then sample and decode one
// token at a time, handing each piece of text to the caller the moment it is
// valid UTF-8.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/generation/generation_step.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

// The token loop of one sequence: feeds each sampled token back until the
// step ends or the cache is full.
template <class Config>
void decode_until_done(Llama<Config>& model, KVCacheBase<Config>& cache, std::span<const float> logits, GenerationStep& step) {
  while (step.next(logits)) {
    if (!cache.has_room(1)) {
      step.finish(StopReason::CacheFull);
      return;
    }
    logits = model.decode(step.last(), cache);
  }
}

// Generates from `logits`, the model's output after the caller fed `context`
// (the tokens so far, for the repetition penalty and the detokeniser) into
// `cache`. Sessions that prefill a turn themselves call this; `start` is when
// the caller's request began, for the time to first token. An exception
// thrown by the callback ends the generation and is rethrown here.
template <class Config>
GenerationResult generate_from(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache,
                               std::span<const float> logits, std::span<const TokenId> context, const GenerationOptions& opt,
                               const PieceCallback& on_piece, std::chrono::steady_clock::time_point start) {
  check_generation<Config>(tok, opt);
  GenerationStep step(tok, opt, context, on_piece, start);
  decode_until_done(model, cache, logits, step);
  if (step.callback_exception()) std::rethrow_exception(step.callback_exception());
  return std::move(step.result());
}

// Generates after `prompt` (ids, BOS included), appending to `cache`. The
// last sampled token is not fed to the model (nothing would read its logits),
// so on return the cache holds the prompt and all generated tokens but the last.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache, std::span<const TokenId> prompt,
                          const GenerationOptions& opt, const PieceCallback& on_piece) {
  const auto t0 = std::chrono::steady_clock::now();
  check_generation<Config>(tok, opt);
  const std::span<const float> logits = model.prefill(prompt, cache, opt.on_prefill_progress);
  const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GenerationResult res = generate_from(model, tok, cache, logits, prompt, opt, on_piece, t0);
  res.prefill_s = prefill_s;
  return res;
}
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache, std::span<const TokenId> prompt,
                          const GenerationOptions& opt, TextCallback on_text) {
  return generate(model, tok, cache, prompt, opt, text_only(std::move(on_text)));
}
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache, std::span<const TokenId> prompt,
                          const GenerationOptions& opt, std::nullptr_t) {
  return generate(model, tok, cache, prompt, opt, PieceCallback());
}

// The same after a text prompt, encoded with BOS.
template <class Config>
GenerationResult generate(Llama<Config>& model, const Tokenizer& tok, KVCacheBase<Config>& cache, std::string_view prompt,
                          const GenerationOptions& opt, TextCallback on_text) {
  const std::vector<TokenId> ids = tok.encode(prompt, true);
  return generate(model, tok, cache, std::span<const TokenId>(ids), opt, text_only(std::move(on_text)));
}

}  // namespace streamllm
