// A chat: one conversation is its messages, the ids its cache holds, and
// that cache. Each turn renders the dialog with the model's chat template and
// prefills only what the cache does not hold yet: the new turn's own tokens
// (and the end of the last answer). Answers are kept as the ids the model
// generated, never re-tokenised, so the cache and the dialog always agree.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
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
    std::vector<TokenId> prompt;  // the ids this turn prefilled: the formatted user turn
    std::vector<TokenId> answer;  // the generated ids, ended as the template ends an answer
    std::string answer_text;
  };

  struct TurnStats {
    std::size_t prefilled = 0;  // tokens this turn prefilled: the new turn's length
    std::size_t answer_tokens = 0;
    double time_to_first_token_s = 0;
    double tokens_per_s = 0;
    StopReason stop = StopReason::MaxTokens;
  };

  // The template is the model file's unless given (ChatTemplate::named);
  // a file whose template is of no family we know throws
  // UnknownChatTemplate here, naming the override.
  ChatSession(Llama<Config>& model, const Tokenizer& tok, std::unique_ptr<KVCacheBase<Config>> cache,
              std::string system_prompt = {}, std::optional<ChatTemplate> chat_template = std::nullopt)
      : model_(&model),
        tok_(&tok),
        cache_(std::move(cache)),
        system_(std::move(system_prompt)),
        template_(chat_template ? std::move(*chat_template) : ChatTemplate::for_model(tok)) {
    if (!cache_) throw InputError("chat: a session needs a cache");
    start_dialog();
  }

  // Formats and prefills a user turn; returns the logits the answer starts
  // from. Throws (and changes nothing) for an empty turn or one that does not
  // fit a dense cache.
  std::span<const float> prefill_turn(std::string_view user) {
    const std::string content = strip_chat_text(user);
    if (content.empty()) throw InputError("chat: the turn is empty");
    messages_.push_back({ChatMessage::Role::User, content});
    answer_ids_.emplace_back();
    std::vector<TokenId> target;
    std::size_t keep = 0;
    try {  // a turn that cannot be read leaves the session as it was
      target = encode_dialog(*tok_, template_, messages_, nullptr, nullptr, true, answer_ids_);
      keep = kept_prefix(target);
      const auto fresh = static_cast<std::int64_t>(target.size() - keep);
      // The prompt, one answer token and the end of the answer must fit.
      if (!cache_->has_room(fresh + 2 - static_cast<std::int64_t>(history_.size() - keep)))
        throw CacheFullError("chat: a turn of " + std::to_string(fresh) + " tokens does not fit the " + cache_->describe() +
                             " (" + std::to_string(cache_->size()) +
                             " positions used); /reset the session, or switch to a sink+window cache "
                             "(--window in examples/chat, DynamicSinkWindowKVCache in code), which never runs out");
    } catch (...) {
      messages_.pop_back();
      answer_ids_.pop_back();
      throw;
    }
    const std::vector<TokenId> prompt = sync(target, keep);
    const auto logits = last_logits_;
    turns_.push_back({content, prompt, {}, {}});
    last_ = {};
    last_.prefilled = prompt.size();
    return logits;
  }

  // One user turn and its streamed answer. A stop asked by the callback, the
  // token limit or a throwing callback all end the answer as the template
  // ends one, in the cache, so the session stays usable (the exception is
  // rethrown after).
  TurnStats ask(std::string_view user, GenerationOptions opt, TextCallback on_text) {
    const auto t0 = std::chrono::steady_clock::now();
    check_generation<Config>(*tok_, opt);
    const auto logits = prefill_turn(user);
    Turn& turn = turns_.back();
    // A dense cache bounds the answer: it must leave room for its end.
    const std::int64_t free = cache_->capacity() - cache_->size();
    if (!cache_->has_room(opt.max_new_tokens < 0 ? cache_->capacity() : std::int64_t{opt.max_new_tokens} + 1))
      opt.max_new_tokens = static_cast<int>(std::max<std::int64_t>(1, free - 1));
    opt.echo_prompt = false;
    opt.continue_text = false;
    GenerationStep step(*tok_, opt, turn.prompt, text_only(std::move(on_text)), t0);
    decode_until_done(*model_, *cache_, logits, step);
    const GenerationResult& res = step.result();
    turn.answer_text = res.text;
    close_answer(turn, res.tokens);
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
    history_.clear();
    last_ = {};
    start_dialog();
  }

  // Called while a long turn is prefilled: (tokens done, tokens in all).
  void set_progress(typename Llama<Config>::Progress p) { progress_ = std::move(p); }

  const std::vector<Turn>& turns() const { return turns_; }
  const TurnStats& last_turn() const { return last_; }
  const KVCacheBase<Config>& cache() const { return *cache_; }
  const std::string& system_prompt() const { return system_; }
  const ChatTemplate& chat_template() const { return template_; }
  // The dialog so far: the system message (if any), users' and answers' text.
  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Per message, the ids an answer was generated as (empty for the others).
  const std::vector<std::vector<TokenId>>& answer_ids() const { return answer_ids_; }

  // Every id the cache holds, in order: what a fresh session would prefill.
  const std::vector<TokenId>& history() const { return history_; }
  std::size_t history_tokens() const { return static_cast<std::size_t>(cache_->size()); }

 private:
  void start_dialog() {
    messages_.clear();
    answer_ids_.clear();
    if (!system_.empty()) {
      messages_.push_back({ChatMessage::Role::System, system_});
      answer_ids_.emplace_back();
    }
  }

  // How much of the cache the dialog's ids keep: all of it, unless the
  // template wrote earlier text anew (mistral-v3 moves the system message to
  // the latest turn). A cache that cannot drop its newest positions (a
  // sink+window cache past its window) then reads the dialog again.
  std::size_t kept_prefix(const std::vector<TokenId>& target) const {
    std::size_t keep = 0;
    while (keep < history_.size() && keep < target.size() && history_[keep] == target[keep]) ++keep;
    if (keep < history_.size() && !cache_->can_truncate(static_cast<std::int64_t>(keep))) keep = 0;
    return keep;
  }

  // Makes the cache hold `target` from `keep` on; returns the ids prefilled.
  std::vector<TokenId> sync(const std::vector<TokenId>& target, std::size_t keep) {
    if (keep < history_.size()) {
      if (keep == 0)
        cache_->clear();
      else
        cache_->truncate(static_cast<std::int64_t>(keep));
      history_.resize(keep);
    }
    std::vector<TokenId> fresh(target.begin() + static_cast<std::ptrdiff_t>(keep), target.end());
    if (!fresh.empty()) last_logits_ = model_->prefill(fresh, *cache_, progress_);
    history_.insert(history_.end(), fresh.begin(), fresh.end());
    return fresh;
  }

  // The answer joins the dialog as the ids it was generated as, ended as the
  // template ends an answer ("</s>", "<|eot_id|>", "<|im_end|>\n"). The last
  // sampled token is not in the cache yet (generation never feeds it): it is
  // fed with that ending. A dense cache at its very end keeps what fits.
  void close_answer(Turn& turn, const std::vector<TokenId>& generated) {
    const std::size_t in_cache = generated.empty() ? 0 : generated.size() - 1;
    history_.insert(history_.end(), generated.begin(), generated.begin() + static_cast<std::ptrdiff_t>(in_cache));
    messages_.push_back({ChatMessage::Role::Assistant, turn.answer_text});
    answer_ids_.push_back(generated);
    std::vector<TokenId> target = encode_dialog(*tok_, template_, messages_, nullptr, nullptr, false, answer_ids_);
    const std::size_t keep = kept_prefix(target);
    // Positions past `keep` are dropped first; a dense cache keeps what fits after them.
    const auto dropped = static_cast<std::int64_t>(history_.size() - keep);
    if (!cache_->has_room(static_cast<std::int64_t>(target.size() - keep) - dropped)) {
      const std::int64_t fits = cache_->capacity() - (cache_->size() - dropped);
      target.resize(keep + static_cast<std::size_t>(std::max<std::int64_t>(0, fits)));
    }
    const std::size_t answer_from = history_.size() - in_cache;
    sync(target, keep);
    turn.answer.assign(history_.begin() + static_cast<std::ptrdiff_t>(std::min(answer_from, history_.size())), history_.end());
  }

  Llama<Config>* model_;
  const Tokenizer* tok_;
  std::unique_ptr<KVCacheBase<Config>> cache_;
  std::string system_;
  ChatTemplate template_;
  std::vector<ChatMessage> messages_;
  std::vector<std::vector<TokenId>> answer_ids_;  // per message: the ids an answer was generated as
  std::vector<TokenId> history_;                  // the ids the cache holds
  std::span<const float> last_logits_;
  std::vector<Turn> turns_;
  TurnStats last_;
  typename Llama<Config>::Progress progress_;
};

}  // namespace streamllm
