// Continuous batching (Yu et al. 2022, "Orca"): many sequences, each with its
// own cache, sampler, stop conditions and streaming callback, advanced by one
// batched forward per step. Sequences join and leave at any step. A step holds
// one token of every decoding sequence and prefill chunks of newly arrived
// ones, within a token budget, so a long prompt does not stall the others.
//
// On a CPU, decode reads every weight once per step: B sequences in one step
// cost little more than one, which is the point of batching here.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/detokenizer.hpp"
#include "streamllm/error.hpp"
#include "streamllm/generate.hpp"
#include "streamllm/model.hpp"
#include "streamllm/sampler.hpp"
#include "streamllm/tokenizer.hpp"

namespace streamllm {

// More sequences than the scheduler takes (active and waiting).
class CapacityError : public InputError {
 public:
  using InputError::InputError;
};

using SequenceId = std::uint64_t;

struct Completion {
  SequenceId id = 0;
  std::vector<TokenId> tokens;  // generated ids (a stop token included)
  std::string text;             // what the callback was handed
  std::size_t prompt_tokens = 0;
  StopReason stop = StopReason::MaxTokens;
  bool cancelled = false;
  std::string error;            // set when the sequence failed (its callback threw, its logits were NaN, ...)
  double time_to_first_token_s = 0;
  double total_s = 0;
};

template <class Config>
class BatchScheduler {
 public:
  struct Options {
    std::size_t max_active = 16;   // sequences in the batch at once
    std::size_t max_waiting = 64;  // sequences queued behind them; more are refused
    std::size_t step_tokens = 256; // tokens per forward: decodes first, then prefill chunks
  };

  struct Request {
    std::vector<TokenId> prompt;                 // BOS included
    std::unique_ptr<KVCacheBase<Config>> cache;  // the sequence's own
    GenerationOptions options;                   // sampling, max tokens, stop tokens (echo is ignored)
    TextCallback on_text;                        // each piece of text; return false to stop
    std::function<void(const Completion&)> on_done;  // once, when the sequence ends for any reason
  };

  BatchScheduler(Llama<Config>& model, const Tokenizer& tok, Options opt) : model_(&model), tok_(&tok), opt_(opt) {
    if (opt_.max_active == 0 || opt_.step_tokens == 0) throw InputError("scheduler: max_active and step_tokens must be positive");
  }
  ~BatchScheduler() { stop(); }
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a sequence; thread-safe. Throws InputError for a request that can
  // never run (ids out of range, an empty prompt, a prompt longer than its
  // cache) and CapacityError when the queue is full. Nothing is queued then.
  SequenceId submit(Request r) {
    if (!r.cache) throw InputError("scheduler: a request needs a cache");
    if (r.prompt.empty()) throw InputError("scheduler: the prompt is empty");
    for (std::size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] < 0 || r.prompt[i] >= Config::Vocab)
        throw InputError("scheduler: token id " + std::to_string(r.prompt[i]) + " at index " + std::to_string(i) +
                         " is out of range [0, " + std::to_string(Config::Vocab) + ")");
    check_generation<Config>(*tok_, r.options);
    r.cache->check_room(static_cast<std::int64_t>(r.prompt.size()));
    std::lock_guard lock(mu_);
    if (active_count_ + incoming_.size() >= opt_.max_active + opt_.max_waiting)
      throw CapacityError("scheduler: " + std::to_string(active_count_ + incoming_.size()) +
                          " sequences are running or waiting, the limit is " +
                          std::to_string(opt_.max_active + opt_.max_waiting));
    const SequenceId id = ++next_id_;
    incoming_.push_back({id, std::move(r)});
    cv_.notify_all();
    return id;
  }

  // Ends a sequence at the next step; thread-safe. Unknown or finished ids are ignored.
  void cancel(SequenceId id) {
    std::lock_guard lock(mu_);
    cancelled_.push_back(id);
    cv_.notify_all();
  }

  // One batched forward over every active sequence; false when there was
  // nothing to do. Call from one thread (or use start()).
  bool step() {
    admit();
    if (active_.empty()) return false;
    plan();
    if (!batch_.empty()) {
      try {
        const auto logits = model_->forward(batch_);
        for (std::size_t i = 0; i < batch_.size(); ++i) {
          Seq& s = *in_batch_[i];
          try {
            advance(s, logits.last(i));
          } catch (const std::exception& e) {  // this sequence's sampling failed (NaN logits, say)
            s.result.error = e.what();
            finish(s, StopReason::Callback);
          }
        }
      } catch (const std::exception& e) {
        // The forward itself failed (out of memory, say): the sequences of
        // this batch end with the error, the scheduler goes on with the rest.
        for (Seq* s : in_batch_) {
          s->result.error = std::string("forward pass failed: ") + e.what();
          finish(*s, StopReason::Callback);
        }
      }
    }
    retire();
    return true;
  }

  // Steps until every submitted sequence has ended.
  void run_until_idle() {
    while (step()) {
    }
  }

  // Runs steps on a thread of its own while there is work (a server's mode).
  void start() {
    if (worker_.joinable()) return;
    stopping_ = false;
    worker_ = std::thread([this] {
      while (!stopping_) {
        if (!step()) {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [this] { return stopping_ || !incoming_.empty() || !cancelled_.empty(); });
        }
      }
    });
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  std::size_t active() const {
    std::lock_guard lock(mu_);
    return active_count_;
  }
  std::size_t waiting() const {
    std::lock_guard lock(mu_);
    return incoming_.size();
  }
  const Options& options() const { return opt_; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Seq {
    SequenceId id;
    Request req;
    Sampler sampler;
    StreamingDetokenizer detok;
    std::vector<TokenId> history;  // prompt + generated, for the repetition penalty
    std::size_t fed = 0;           // prompt tokens in the cache
    std::size_t chunk = 0;         // prompt tokens in this step's batch
    TokenId pending = -1;          // sampled, not yet in the cache
    Completion result;
    bool done = false;
    Clock::time_point start;

    Seq(SequenceId i, Request r, const Tokenizer& tok)
        : id(i), req(std::move(r)), sampler(req.options.sampling), detok(tok), start(Clock::now()) {
      history = req.prompt;
      history.reserve(req.prompt.size() + static_cast<std::size_t>(req.options.max_new_tokens));
      result.id = i;
      result.prompt_tokens = req.prompt.size();
      // The detokeniser knows the prompt, so the completion's text joins it.
      if (req.options.continue_text)
        for (TokenId t : req.prompt) detok.push(t);
    }
    bool prefilling() const { return fed < req.prompt.size(); }
  };

  // Takes new sequences (up to max_active) and cancellations.
  void admit() {
    std::vector<SequenceId> cancels;
    std::vector<std::pair<SequenceId, Request>> dropped;  // cancelled while waiting
    {
      std::lock_guard lock(mu_);
      cancels.swap(cancelled_);
      for (auto it = incoming_.begin(); it != incoming_.end();) {
        if (std::find(cancels.begin(), cancels.end(), it->first) != cancels.end()) {
          dropped.push_back(std::move(*it));
          it = incoming_.erase(it);
        } else {
          ++it;
        }
      }
      while (!incoming_.empty() && active_.size() < opt_.max_active) {
        auto [id, r] = std::move(incoming_.front());
        incoming_.pop_front();
        active_.push_back(std::make_unique<Seq>(id, std::move(r), *tok_));
      }
      active_count_ = active_.size();
    }
    for (auto& [id, r] : dropped) {  // callbacks run outside the lock
      Completion c;
      c.id = id;
      c.prompt_tokens = r.prompt.size();
      c.cancelled = true;
      c.stop = StopReason::Callback;
      if (r.on_done) r.on_done(c);
    }
    for (auto& s : active_)
      if (!s->done && std::find(cancels.begin(), cancels.end(), s->id) != cancels.end()) {
        s->result.cancelled = true;
        finish(*s, StopReason::Callback);
      }
  }

  // This step's batch: one token per decoding sequence, then prefill chunks
  // in arrival order within what is left of the budget.
  void plan() {
    batch_.clear();
    in_batch_.clear();
    std::size_t budget = opt_.step_tokens;
    for (auto& s : active_) {
      if (s->done || s->prefilling()) continue;
      if (!s->req.cache->has_room(1)) {
        finish(*s, StopReason::CacheFull);
        continue;
      }
      batch_.push_back({s->req.cache.get(), {&s->pending, 1}, false});
      in_batch_.push_back(s.get());
      budget = budget > 0 ? budget - 1 : 0;
    }
    for (auto& s : active_) {
      if (s->done || !s->prefilling() || budget == 0) continue;
      const std::size_t n = std::min(budget, s->req.prompt.size() - s->fed);
      batch_.push_back({s->req.cache.get(), {s->req.prompt.data() + s->fed, n}, false});
      in_batch_.push_back(s.get());
      s->chunk = n;
      budget -= n;
    }
  }

  // After the forward: a finished prefill or a decode step samples a token.
  void advance(Seq& s, std::span<const float> logits) {
    if (s.prefilling()) {
      s.fed += s.chunk;
      if (s.prefilling()) return;  // more of the prompt to come
    }
    const TokenId next = s.sampler.sample(logits, s.history);
    if (s.result.tokens.empty()) s.result.time_to_first_token_s = std::chrono::duration<double>(Clock::now() - s.start).count();
    s.result.tokens.push_back(next);
    s.history.push_back(next);
    const auto& o = s.req.options;
    bool stop = o.stop_at_eos && next == tok_->eos();
    for (TokenId t : o.stop_tokens) stop = stop || t == next;
    if (stop) return finish(s, StopReason::EndOfSequence);
    if (!emit(s, s.detok.push(next))) return finish(s, StopReason::Callback);
    if (s.result.tokens.size() >= static_cast<std::size_t>(o.max_new_tokens)) return finish(s, StopReason::MaxTokens);
    s.pending = next;
  }

  // Hands a piece to the sequence's callback; a throwing callback fails that
  // sequence only.
  bool emit(Seq& s, std::string_view piece) {
    if (piece.empty()) return true;
    s.result.text += piece;
    if (!s.req.on_text) return true;
    try {
      return s.req.on_text(piece);
    } catch (const std::exception& e) {
      s.result.error = e.what();
    } catch (...) {
      s.result.error = "unknown exception from the text callback";
    }
    return false;
  }

  void finish(Seq& s, StopReason why) {
    if (s.done) return;
    s.done = true;
    s.result.stop = why;
    if (why != StopReason::Callback) emit(s, s.detok.finish());
    s.result.total_s = std::chrono::duration<double>(Clock::now() - s.start).count();
  }

  // Ended sequences leave (their caches are freed) and are reported.
  void retire() {
    std::vector<std::unique_ptr<Seq>> ended;
    for (auto it = active_.begin(); it != active_.end();) {
      if ((*it)->done) {
        ended.push_back(std::move(*it));
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    {
      std::lock_guard lock(mu_);
      active_count_ = active_.size();
    }
    report_all(ended);
  }

  // Every ended sequence is reported even if an on_done throws; the first
  // exception is rethrown once all have been.
  static void report_all(std::vector<std::unique_ptr<Seq>>& ended) {
    std::exception_ptr first;
    for (auto& s : ended) {
      if (!s->req.on_done) continue;
      try {
        s->req.on_done(s->result);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  Llama<Config>* model_;
  const Tokenizer* tok_;
  Options opt_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<SequenceId, Request>> incoming_;
  std::vector<SequenceId> cancelled_;
  SequenceId next_id_ = 0;
  std::size_t active_count_ = 0;
  std::atomic<bool> stopping_ = false;
  std::thread worker_;

  // Owned by the stepping thread.
  std::vector<std::unique_ptr<Seq>> active_;
  std::vector<typename Llama<Config>::Sequence> batch_;
  std::vector<Seq*> in_batch_;
};

}  // namespace streamllm
