// One generation step, shared by generate() and the batch scheduler: sample
// a token from the model's logits, check the stops, detokenise, hold back
// what may still become a stop string, hand the rest to the caller, count.
// Whoever runs the model (one sequence, or many in a batch) feeds the token
// back and calls again; everything a generation reports is in one result.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/generation/sampler.hpp"
#include "streamllm/text/detokenizer.hpp"
#include "streamllm/text/stop_strings.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

enum class StopReason {
  EndOfSequence,  // the model's EOS
  StopToken,      // one of GenerationOptions::stop_tokens
  StopString,     // one of GenerationOptions::stop_strings (not emitted)
  MaxTokens,      // the token limit
  CacheFull,      // a dense cache has no room for the next token
  Cancelled,      // the caller: a callback returned false, or a cancel()
  Error,          // a failure (its message in GenerationResult::error)
};

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::EndOfSequence: return "end of sequence";
    case StopReason::StopToken: return "stop token";
    case StopReason::StopString: return "stop string";
    case StopReason::MaxTokens: return "token limit";
    case StopReason::CacheFull: return "cache full";
    case StopReason::Cancelled: return "cancelled";
    case StopReason::Error: return "error";
  }
  return "?";
}

struct GenerationOptions {
  int max_new_tokens = 256;  // negative: no limit (a sink+window cache never fills)
  SamplingParams sampling;
  bool echo_prompt = false;  // stream the prompt's text first
  // The generated text continues the prompt's (a completion): spaces at the
  // join are kept. false: it is a text of its own (a chat answer), whose
  // first leading space is dropped as decode of the answer alone would.
  bool continue_text = true;
  // Called as the prompt's chunks are prefilled: (tokens done, tokens in all).
  std::function<void(std::size_t, std::size_t)> on_prefill_progress;
  std::vector<TokenId> stop_tokens;       // besides EOS when stop_at_eos
  std::vector<std::string> stop_strings;  // at most 4; the text ends before the first one
  bool stop_at_eos = true;
  // >= 0: record each generated token's log-probability and this many of
  // the most likely alternatives (GenerationResult::logprobs).
  int logprobs = -1;
};

struct GenerationResult {
  std::uint64_t id = 0;                // the scheduler's sequence id (0 from generate())
  std::vector<TokenId> tokens;         // generated ids (a stop token included)
  std::vector<TokenLogprob> logprobs;  // one per token when asked (a stop token's included)
  std::string text;                    // what the callback was handed
  std::size_t prompt_tokens = 0;
  std::size_t cached_tokens = 0;  // prompt tokens found in a cache rather than prefilled
  // Of those, the previous answer's last ones that the scheduler had not yet
  // fed when this request came: they go in with this prompt (scheduler.hpp).
  std::size_t closing_tokens = 0;
  StopReason stop = StopReason::MaxTokens;
  std::string error;                 // the failure, when stop == Error
  double time_to_first_token_s = 0;  // request start to the first generated token
  double prefill_s = 0;              // request start to the prompt's logits
  double decode_s = 0;               // first to last generated token
  double total_s = 0;

  std::size_t prefilled_tokens() const { return prompt_tokens - cached_tokens; }
  // Decode speed: tokens after the first, over the time they took.
  double tokens_per_s() const {
    return tokens.size() > 1 && decode_s > 0 ? static_cast<double>(tokens.size() - 1) / decode_s : 0.0;
  }
  double prefill_tokens_per_s() const { return prefill_s > 0 ? static_cast<double>(prefilled_tokens()) / prefill_s : 0.0; }
};

// A piece of streamed text and the generated tokens whose text it completes
// (with their log-probabilities when asked). Views valid during the call.
struct Piece {
  std::string_view text;
  std::span<const TokenId> tokens;
  std::span<const TokenLogprob> logprobs;
};

// Receive each piece; return false to stop generation (StopReason::Cancelled).
using PieceCallback = std::function<bool(const Piece&)>;
using TextCallback = std::function<bool(std::string_view)>;

inline PieceCallback text_only(TextCallback on_text) {
  if (!on_text) return {};
  return [on_text = std::move(on_text)](const Piece& p) { return p.text.empty() || on_text(p.text); };
}

// Arguments a generation cannot start with, before anything is computed.
inline void check_generation(const Tokenizer& tok, const GenerationOptions& opt, int model_vocab) {
  if (tok.vocab_size() != model_vocab)
    throw InputError("generate: tokenizer '" + tok.source() + "' has " + std::to_string(tok.vocab_size()) +
                     " pieces, the model " + std::to_string(model_vocab));
  opt.sampling.validate();
  for (const auto& [id, bias] : opt.sampling.logit_bias)
    if (id >= model_vocab)
      throw InputError("generate: logit_bias names token " + std::to_string(id) + ", the vocabulary has " +
                       std::to_string(model_vocab));
  for (TokenId t : opt.stop_tokens) tok.check_id(t);
  StopStrings check(opt.stop_strings);
  if (opt.logprobs > model_vocab)
    throw InputError("generate: logprobs " + std::to_string(opt.logprobs) + " exceeds the vocabulary");
}
template <class Config>
void check_generation(const Tokenizer& tok, const GenerationOptions& opt) {
  check_generation(tok, opt, Config::Vocab);
}

class GenerationStep {
 public:
  using Clock = std::chrono::steady_clock;

  // `context` is what the model has been fed (the prompt, BOS included): the
  // repetition penalty reads it, and the detokeniser joins the text to it.
  // With echo_prompt its text is streamed here, first.
  GenerationStep(const Tokenizer& tok, const GenerationOptions& opt, std::span<const TokenId> context, PieceCallback on_piece,
                 Clock::time_point start = Clock::now())
      : tok_(&tok),
        opt_(opt),
        sampler_(opt.sampling),
        detok_(tok),
        stops_(opt.stop_strings),
        on_piece_(std::move(on_piece)),
        start_(start),
        first_token_(start) {
    result_.prompt_tokens = context.size();
    const std::size_t expected = opt_.max_new_tokens >= 0 ? static_cast<std::size_t>(opt_.max_new_tokens) : 256;
    history_.reserve(context.size() + expected);
    history_.assign(context.begin(), context.end());
    result_.tokens.reserve(expected);
    if (opt_.echo_prompt || opt_.continue_text)
      for (TokenId id : context) {  // the detokeniser must know the text so far
        const std::string_view piece = detok_.push(id);
        if (opt_.echo_prompt && !piece.empty() && !hand_over({piece, {}, {}})) {
          declined();
          return;
        }
      }
    if (opt_.max_new_tokens == 0) finish(StopReason::MaxTokens);
  }

  bool done() const { return done_; }
  // The last sampled token: the one to feed the model next.
  TokenId last() const { return result_.tokens.back(); }

  // Samples the next token from the logits of everything fed so far and
  // streams its text. true: feed last() and call again with its logits;
  // false: the generation has ended (result().stop says why).
  bool next(std::span<const float> logits) {
    if (done_) return false;
    const TokenId t = sampler_.sample(logits, history_);
    if (result_.tokens.empty()) {
      first_token_ = Clock::now();
      result_.time_to_first_token_s = seconds(start_, first_token_);
    }
    result_.tokens.push_back(t);
    history_.push_back(t);
    if (opt_.logprobs >= 0) result_.logprobs.push_back(token_logprob(logits, t, opt_.logprobs));
    if (const auto stop = stop_token(t)) {
      text_end_.push_back(kNoText);  // never streamed
      finish(*stop);
      return false;
    }
    const std::string_view piece = detok_.push(t);
    produced_ += piece.size();
    text_end_.push_back(produced_);
    if (!emit(stops_.empty() ? piece : stops_.push(piece), false)) return false;
    if (stops_.matched()) {
      finish(StopReason::StopString);
      return false;
    }
    if (opt_.max_new_tokens >= 0 && result_.tokens.size() >= static_cast<std::size_t>(opt_.max_new_tokens)) {
      finish(StopReason::MaxTokens);
      return false;
    }
    return true;
  }

  // Ends the generation (for a reason of the caller's: a full cache, a
  // cancel). Unless cancelled or failed, bytes held back are streamed: an
  // incomplete UTF-8 tail as U+FFFD (as decode), text held for a stop string
  // that can no longer match. Idempotent.
  void finish(StopReason why) {
    if (done_) return;
    done_ = true;
    result_.stop = why;
    if (why != StopReason::Cancelled && why != StopReason::Error && !stops_.matched()) {
      const std::string_view tail = detok_.finish();
      produced_ += tail.size();
      std::string out(stops_.empty() ? tail : stops_.push(tail));
      if (stops_.matched()) {
        result_.stop = StopReason::StopString;
      } else {
        out += stops_.flush();
        all_final_ = true;  // every token's text is out now
      }
      if (!emit(out, true) && callback_error_) result_.stop = StopReason::Error;
    }
    const auto end = Clock::now();
    result_.decode_s = result_.tokens.empty() ? 0.0 : seconds(first_token_, end);
    result_.total_s = seconds(start_, end);
  }

  // Ends the generation with an error (a failed forward, NaN logits).
  void fail(std::string message) {
    if (done_) return;
    result_.error = std::move(message);
    finish(StopReason::Error);
  }

  const GenerationResult& result() const { return result_; }
  GenerationResult& result() { return result_; }
  // What a throwing callback threw (the generation then ended with Error).
  std::exception_ptr callback_exception() const { return callback_error_; }
  Clock::time_point start() const { return start_; }

 private:
  static constexpr std::size_t kNoText = std::numeric_limits<std::size_t>::max();

  static double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

  std::optional<StopReason> stop_token(TokenId t) const {
    if (opt_.stop_at_eos && tok_->ends_generation(t)) return StopReason::EndOfSequence;
    for (TokenId s : opt_.stop_tokens)
      if (s == t) return tok_->ends_generation(t) ? StopReason::EndOfSequence : StopReason::StopToken;
    return std::nullopt;
  }

  // Streams released text with the tokens it completes. false when the
  // callback declined or threw (before the end, that ends the generation).
  bool emit(std::string_view text, bool final) {
    released_ += text.size();
    std::size_t k = reported_;
    while (k < text_end_.size() && (text_end_[k] <= released_ || (all_final_ && text_end_[k] != kNoText))) ++k;
    if (text.empty() && (k == reported_ || !final)) return true;  // tokens without text wait for the next piece
    const std::span<const TokenId> tokens(result_.tokens.data() + reported_, k - reported_);
    std::span<const TokenLogprob> logprobs;
    if (!result_.logprobs.empty()) logprobs = {result_.logprobs.data() + reported_, k - reported_};
    reported_ = k;
    if (hand_over({text, tokens, logprobs})) return true;
    if (!final) declined();
    return false;
  }

  // The callback said stop, or threw.
  void declined() { finish(callback_error_ ? StopReason::Error : StopReason::Cancelled); }

  bool hand_over(const Piece& p) {
    result_.text += p.text;
    if (!on_piece_) return true;
    try {
      if (on_piece_(p)) return true;
    } catch (const std::exception& e) {
      callback_error_ = std::current_exception();
      result_.error = e.what();
    } catch (...) {
      callback_error_ = std::current_exception();
      result_.error = "unknown exception from the text callback";
    }
    return false;
  }

  const Tokenizer* tok_;
  GenerationOptions opt_;
  Sampler sampler_;
  StreamingDetokenizer detok_;
  StopStrings stops_;
  PieceCallback on_piece_;
  Clock::time_point start_, first_token_;
  std::vector<TokenId> history_;       // context + generated, for the repetition penalty
  std::vector<std::size_t> text_end_;  // per token: bytes of generated text once it was decoded
  std::size_t produced_ = 0, released_ = 0, reported_ = 0;
  bool all_final_ = false;
  bool done_ = false;
  std::exception_ptr callback_error_;
  GenerationResult result_;
};

}  // namespace streamllm
