// A chat: one conversation is its token history and a KV cache holding it.
// Each new user turn is formatted with the Llama 2 chat template and only its
// own tokens are prefilled; the history is kept as ids per turn and never
// re-tokenised, so the cache and the history always say the same thing.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/generation/generate.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/text/chat_template.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

template <class Config>
class ChatSession {
 public:
  struct Turn {
    std::string user;
    std::vector<TokenId> prompt;  // BOS + the formatted user turn
    std::vector<TokenId> answer;  // generated ids, closed with EOS
    std::string answer_text;
  };

  struct TurnStats {
    std::size_t prefilled = 0;  // tokens this turn prefilled: the new turn's length
    std::size_t answer_tokens = 0;
    double time_to_first_token_s = 0;
    double tokens_per_s = 0;
    StopReason stop = StopReason::MaxTokens;
  };

  ChatSession(Llama<Config>& model, const Tokenizer& tok, std::unique_ptr<KVCacheBase<Config>> cache,
              std::string system_prompt = {})
      : model_(&model), tok_(&tok), cache_(std::move(cache)), system_(std::move(system_prompt)) {
    if (!cache_) throw InputError("chat: a session needs a cache");
  }

  // Formats and prefills a user turn; returns the logits the answer starts
  // from. Throws (and changes nothing) for an empty turn or one that does not
  // fit a dense cache.
  std::span<const float> prefill_turn(std::string_view user) {
    const std::string content = Llama2ChatTemplate::strip(user);
    if (content.empty()) throw InputError("chat: the turn is empty");
    std::vector<TokenId> prompt = Llama2ChatTemplate::encode_user_turn(*tok_, content, turns_.empty() ? system_ : "");
    // The prompt, one answer token and its closing EOS must fit.
    if (!cache_->has_room(static_cast<std::int64_t>(prompt.size()) + 2))
      throw CacheFullError("chat: a turn of " + std::to_string(prompt.size()) + " tokens does not fit the " + cache_->describe() +
                           " (" + std::to_string(cache_->size()) +
                           " positions used); /reset the session, or switch to a sink+window cache "
                           "(--window in examples/chat, DynamicSinkWindowKVCache in code), which never runs out");
    const auto logits = model_->prefill(prompt, *cache_, progress_);
    turns_.push_back({std::string(content), std::move(prompt), {}, {}});
    last_ = {};
    last_.prefilled = turns_.back().prompt.size();
    return logits;
  }

  // One user turn and its streamed answer. A stop asked by the callback, the
  // token limit or a throwing callback all end the answer with EOS in the
  // cache, so the session stays usable (the exception is rethrown after).
  TurnStats ask(std::string_view user, GenerationOptions opt, TextCallback on_text) {
    const auto t0 = std::chrono::steady_clock::now();
    check_generation<Config>(*tok_, opt);
    const auto logits = prefill_turn(user);
    Turn& turn = turns_.back();
    // A dense cache bounds the answer: it must leave room for the closing EOS.
    const std::int64_t free = cache_->capacity() - cache_->size();
    if (!cache_->has_room(opt.max_new_tokens < 0 ? cache_->capacity() : std::int64_t{opt.max_new_tokens} + 1))
      opt.max_new_tokens = static_cast<int>(std::max<std::int64_t>(1, free - 1));
    opt.echo_prompt = false;
    opt.continue_text = false;
    GenerationStep step(*tok_, opt, turn.prompt, text_only(std::move(on_text)), t0);
    decode_until_done(*model_, *cache_, logits, step);
    const GenerationResult& res = step.result();
    turn.answer_text = res.text;
    turn.answer = res.tokens;
    close_answer(turn);
    last_.answer_tokens = res.tokens.size();
    last_.time_to_first_token_s = res.time_to_first_token_s;
    last_.tokens_per_s = res.tokens_per_s();
    last_.stop = res.stop;
    if (step.callback_exception()) std::rethrow_exception(step.callback_exception());
    return last_;
  }

  // Forgets the conversation (the cache keeps its memory).
  void reset() {
    cache_->clear();
    turns_.clear();
    last_ = {};
  }

  // Called while a long turn is prefilled: (tokens done, tokens in all).
  void set_progress(typename Llama<Config>::Progress p) { progress_ = std::move(p); }

  const std::vector<Turn>& turns() const { return turns_; }
  const TurnStats& last_turn() const { return last_; }
  const KVCacheBase<Config>& cache() const { return *cache_; }
  const std::string& system_prompt() const { return system_; }

  // Every id the cache holds, in order: what a fresh session would prefill.
  std::vector<TokenId> history() const {
    std::vector<TokenId> all;
    for (const Turn& t : turns_) {
      all.insert(all.end(), t.prompt.begin(), t.prompt.end());
      all.insert(all.end(), t.answer.begin(), t.answer.end());
    }
    return all;
  }
  std::size_t history_tokens() const { return static_cast<std::size_t>(cache_->size()); }

 private:
  // The last sampled token is not in the cache yet (generation never feeds
  // it); feed it, and an EOS if the answer did not end with one, so the
  // history reads "... answer </s>" as in Meta's format.
  void close_answer(Turn& turn) {
    const std::size_t in_cache = turn.answer.empty() ? 0 : turn.answer.size() - 1;
    Llama2ChatTemplate::close_answer(*tok_, turn.answer);
    std::size_t end = turn.answer.size();
    if (!cache_->has_room(static_cast<std::int64_t>(end - in_cache)))  // a dense cache at its very end: keep what fits
      end = in_cache + static_cast<std::size_t>(cache_->capacity() - cache_->size());
    turn.answer.erase(turn.answer.begin() + static_cast<std::ptrdiff_t>(end), turn.answer.end());
    const std::vector<TokenId> tail(turn.answer.begin() + static_cast<std::ptrdiff_t>(in_cache), turn.answer.end());
    if (!tail.empty()) model_->prefill(tail, *cache_);
  }

  Llama<Config>* model_;
  const Tokenizer* tok_;
  std::unique_ptr<KVCacheBase<Config>> cache_;
  std::string system_;
  std::vector<Turn> turns_;
  TurnStats last_;
  typename Llama<Config>::Progress progress_;
};

}  // namespace streamllm
