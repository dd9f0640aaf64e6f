// Continuous batching (Yu et al. 2022, "Orca"): many sequences, each with its
// own cache, sampler, stop conditions and streaming callback, advanced by one
// batched forward per step. Sequences join and leave at any step. A step holds
// one token of every decoding sequence and prefill chunks of newly arrived
// ones, within a token budget, so a long prompt does not stall the others.
//
// On a CPU, decode reads every weight once per step: B sequences in one step
// cost little more than one, which is the point of batching here.
//
// Prefix reuse: a sequence that asks for a cache (rather than bringing one)
// starts from the kept cache holding the longest prefix of its prompt
// (cache_pool.hpp), or from a copy of a running sequence's cache once that
// one has prefilled the shared part (a long system prompt sent by many
// clients at once is prefilled once). When it ends, its cache is closed (the
// last sampled token, and for a chat answer EOS, fed) and kept, with the ids
// it holds, for the request that continues the conversation. A closing rides
// along with the next forward, or with the conversation's next turn when
// that comes first (SchedulerOptions::close_wait).
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

#include "streamllm/cache/cache_pool.hpp"
#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/generation/generation_step.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

// More sequences than the scheduler takes (active and waiting).
class CapacityError : public InputError {
 public:
  using InputError::InputError;
};

// The scheduler is stopping and takes no more sequences.
class ShutdownError : public InputError {
 public:
  using InputError::InputError;
};

using SequenceId = std::uint64_t;

struct SchedulerOptions {
  std::size_t max_active = 16;    // sequences in the batch at once
  std::size_t max_waiting = 64;   // sequences queued behind them; more are refused
  std::size_t step_tokens = 256;  // tokens per forward: decodes first, then prefill chunks
  CachePoolOptions pool;          // kept caches (its fingerprint is the model's)
  // A sequence whose prompt starts with what a running one is prefilling
  // waits for it and copies its cache instead of prefilling that part too.
  bool share_prefixes = true;
  // How long a closing (an answer's last token, and EOS, still to go into
  // its cache) waits for a forward to ride along with, where the scheduler
  // steps on its own thread (start()): another sequence's step, or the
  // conversation's next turn, which then takes the cache and feeds those
  // tokens with its prompt in one forward. A client that replies at once (an
  // agent, a benchmark) saves a whole pass over the weights per turn, one
  // that replies later waits for nothing: the closing has run by then. 0:
  // closings run at once, as they do where the caller steps.
  std::chrono::milliseconds close_wait{100};
};

// What a sequence asks of the scheduler, apart from a cache of its own
// (BatchScheduler::Request adds that). Free of the model's shape, so that a
// server's code above the scheduler is compiled once (serve/engine.hpp).
struct SequenceRequest {
  std::vector<TokenId> prompt;                           // BOS included
  CacheShape cache_shape;                                // of the new cache, when neither a kept one nor its own
  GenerationOptions options;                             // sampling, max tokens, stops, logprobs, echo
  PieceCallback on_piece;                                // each piece of text; return false to stop
  std::function<void(const GenerationResult&)> on_done;  // once, when the sequence ends for any reason
  // A chat answer: its cache is closed with these ids, as the chat template
  // ends an answer and the next turn will read it ("</s>", "<|eot_id|>",
  // "<|im_end|>\n"); they stand in for the end token the model gave.
  std::vector<TokenId> answer_end;
  // Kept with the cache (a server's record of the answers it holds).
  std::function<std::string(const GenerationResult&)> note;
};

template <class Config>
class BatchScheduler {
 public:
  using Cache = KVCacheBase<Config>;
  using Options = SchedulerOptions;
  // A sequence's own cache (its prompt is appended to what it holds), or
  // none: the kept cache with the longest prefix of the prompt, else a new
  // one of `cache_shape`.
  struct Request : SequenceRequest {
    std::unique_ptr<Cache> cache;
  };

  BatchScheduler(Llama<Config>& model, const Tokenizer& tok, Options opt)
      : model_(&model), tok_(&tok), opt_(std::move(opt)), pool_(pool_options(opt_.pool, model)) {
    if (opt_.max_active == 0 || opt_.step_tokens == 0) throw InputError("scheduler: max_active and step_tokens must be positive");
  }
  ~BatchScheduler() { stop(); }
  BatchScheduler(const BatchScheduler&) = delete;
  BatchScheduler& operator=(const BatchScheduler&) = delete;

  // Queues a sequence; thread-safe. Throws InputError for a request that can
  // never run (ids out of range, an empty prompt, a prompt longer than its
  // cache), CapacityError when the queue is full and ShutdownError once
  // stopping. Nothing is queued then.
  SequenceId submit(Request r) {
    if (r.prompt.empty()) throw InputError("scheduler: the prompt is empty");
    for (std::size_t i = 0; i < r.prompt.size(); ++i)
      if (r.prompt[i] < 0 || r.prompt[i] >= Config::Vocab)
        throw InputError("scheduler: token id " + std::to_string(r.prompt[i]) + " at index " + std::to_string(i) +
                         " is out of range [0, " + std::to_string(Config::Vocab) + ")");
    check_generation<Config>(*tok_, r.options);
    check_cache(r);
    std::lock_guard lock(mu_);
    if (!accepting_) throw ShutdownError("scheduler: shutting down, no new sequences");
    if (active_count_ + incoming_.size() >= opt_.max_active + opt_.max_waiting)
      throw CapacityError("scheduler: " + std::to_string(active_count_ + incoming_.size()) +
                          " sequences are running or waiting, the limit is " +
                          std::to_string(opt_.max_active + opt_.max_waiting));
    const SequenceId id = ++next_id_;
    incoming_.push_back({id, std::move(r), Clock::now()});
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
  bool step() { return advance(false); }

  // Steps until every submitted sequence has ended.
  void run_until_idle() {
    while (step()) {}
  }

  // Runs steps on a thread of its own while there is work (a server's mode).
  void start() {
    if (worker_.joinable()) return;
    stopping_ = false;
    worker_ = std::thread([this] {
      const auto news = [this] { return stopping_ || !incoming_.empty() || !cancelled_.empty(); };
      while (!stopping_) {
        const bool worked = advance(true);
        std::unique_lock lock(mu_);
        if (!worked)
          cv_.wait(lock, news);
        else if (batch_.empty() && close_due_ != Clock::time_point::max())          // closings waiting for company (plan())
          cv_.wait_until(lock, close_due_, [&] { return news() || !accepting_; });  // a drain: none will come
      }
    });
  }

  // Takes no more sequences, lets those running finish for up to `grace`,
  // then stops (below).
  void drain(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mu_);
      accepting_ = false;
      cv_.notify_all();  // closings waiting for company run now: none will come
    }
    const auto deadline = Clock::now() + grace;
    while (Clock::now() < deadline && (active() > 0 || waiting() > 0 || closing() > 0)) {
      if (!worker_.joinable())
        step();
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop();
  }

  // Stops stepping. Every sequence still running or waiting ends as
  // cancelled, its on_done called; kept caches go to the folder if any.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      accepting_ = false;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    end_all();
    pool_.flush();
    publish();
  }

  // Sequences running (not counting ended ones whose closing waits).
  std::size_t active() const {
    std::lock_guard lock(mu_);
    return active_count_;
  }
  // Ended sequences whose closing has not run yet (waiting for company, plan()).
  std::size_t closing() const { return closing_count_; }
  std::size_t waiting() const {
    std::lock_guard lock(mu_);
    return incoming_.size();
  }
  // Bytes of the caches kept for reuse (memory), and how many there are:
  // those in the pool, and those whose closing waits (plan()).
  std::size_t pool_bytes() const { return pool_bytes_; }
  std::size_t pool_entries() const { return pool_entries_; }
  const Options& options() const { return opt_; }

 private:
  using Clock = std::chrono::steady_clock;
  // Wait for a running sequence's prefix only when it saves this many tokens.
  static constexpr std::size_t kMinShared = 16;

  enum class Phase {
    Waiting,  // for a running sequence to prefill the prefix it will copy
    Prefill,
    Decode,
    Closing,  // generation over; its last tokens go into the cache, which is then kept
    Ended,
  };

  struct Incoming {
    SequenceId id;
    Request req;
    Clock::time_point submitted;
  };

  struct Seq {
    SequenceId id;
    Request req;
    Clock::time_point submitted;
    std::unique_ptr<Cache> cache;
    std::optional<GenerationStep> step;
    Phase phase = Phase::Prefill;
    std::size_t fed = 0;            // prompt tokens in the cache
    std::vector<TokenId> feed;      // this step's tokens
    std::vector<TokenId> in_cache;  // what the cache holds (when `known`)
    bool known = true;              // false: a caller's cache that held something already
    bool broken = false;            // a failed forward left the cache half written
    bool reported = false;
    SequenceId source = 0;  // Waiting: whose cache, up to `wait_for` tokens
    std::size_t wait_for = 0;
    Clock::time_point closes_by;  // Closing: when it runs even alone
  };

  // admit, plan, run, retire. `closings_wait`: a closing with no forward to
  // ride along with waits (close_wait) instead of running alone.
  bool advance(bool closings_wait) {
    admit();
    if (active_.empty()) return false;
    plan(closings_wait);
    if (!batch_.empty()) run_batch();
    retire();
    return true;
  }

  static CachePoolOptions pool_options(CachePoolOptions o, const Llama<Config>& m) {
    o.fingerprint = m.fingerprint();
    return o;
  }

  void check_cache(const Request& r) const {
    const auto need = static_cast<std::int64_t>(r.prompt.size());
    if (r.cache) return r.cache->check_room(need);
    const CacheShape& s = r.cache_shape;
    if (!s.dense()) {
      if (s.sinks < 0 || s.window < 1 || s.sinks + s.window > Config::MaxSeq)
        throw InputError("scheduler: a sink+window cache of " + std::to_string(s.sinks) + " sinks and a window of " +
                         std::to_string(s.window) + " (sinks >= 0, window >= 1, sum <= MaxSeq " + std::to_string(Config::MaxSeq) +
                         ")");
      return;
    }
    const std::int64_t cap = s.capacity > 0 ? s.capacity : Config::MaxSeq;
    if (need > cap)
      throw CacheFullError("scheduler: a prompt of " + std::to_string(need) + " tokens does not fit a dense cache of " +
                           std::to_string(cap) + " positions");
  }

  // Takes new sequences (up to max_active) and cancellations.
  void admit() {
    std::vector<SequenceId> cancels;
    std::vector<Incoming> dropped, admitted;        // cancelled while waiting; taken in
    const auto running = static_cast<std::size_t>(  // an ended sequence's closing takes no place
        std::count_if(active_.begin(), active_.end(), [](const auto& s) { return s->phase != Phase::Closing; }));
    {
      std::lock_guard lock(mu_);
      cancels.swap(cancelled_);
      for (auto it = incoming_.begin(); it != incoming_.end();) {
        if (std::find(cancels.begin(), cancels.end(), it->id) != cancels.end()) {
          dropped.push_back(std::move(*it));
          it = incoming_.erase(it);
        } else {
          ++it;
        }
      }
      while (!incoming_.empty() && running + admitted.size() < opt_.max_active) {
        admitted.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
    }
    for (auto& in : dropped) report_unstarted(in);
    for (auto& in : admitted) begin(std::move(in));
    for (auto& s : active_)
      if (s->phase == Phase::Waiting) resolve_wait(*s);
    for (auto& s : active_)
      if (!s->step->done() && std::find(cancels.begin(), cancels.end(), s->id) != cancels.end()) {
        s->step->finish(StopReason::Cancelled);
        generation_over(*s);
      }
    publish();
  }

  // A sequence cancelled before it started: reported, nothing run.
  void report_unstarted(Incoming& in) {
    GenerationStep step(*tok_, {}, in.req.prompt, {}, in.submitted);
    step.finish(StopReason::Cancelled);
    step.result().id = in.id;
    if (in.req.on_done) in.req.on_done(step.result());
  }

  void begin(Incoming in) {
    auto s = std::make_unique<Seq>();
    s->id = in.id;
    s->req = std::move(in.req);
    s->submitted = in.submitted;
    s->step.emplace(*tok_, s->req.options, s->req.prompt, s->req.on_piece, s->submitted);
    s->step->result().id = s->id;
    if (s->req.cache) {
      s->cache = std::move(s->req.cache);
      s->known = s->cache->size() == 0;
    } else if (!continue_closing(*s)) {
      const auto [source, shared] = opt_.share_prefixes ? best_running_prefix(*s) : std::pair<const Seq*, std::size_t>{};
      if (source && shared >= kMinShared && shared >= pool_.match(s->req.prompt, s->req.cache_shape) + kMinShared) {
        s->phase = Phase::Waiting;
        s->source = source->id;
        s->wait_for = shared;
      } else {
        start_from_pool(*s);
      }
    }
    Seq& seq = *s;
    active_.push_back(std::move(s));
    if (seq.step->done()) generation_over(seq);  // a limit of 0, or the echo was declined
  }

  // The next turn of a conversation whose closing has not run yet (plan()):
  // the turn takes the cache, and the closing's tokens go in as the first of
  // its prompt, one forward for both. They are the history the server held
  // (cached_tokens), fed with this prompt (closing_tokens).
  bool continue_closing(Seq& s) {
    for (auto& a : active_) {
      if (a->phase != Phase::Closing || !a->known || a->broken || !a->cache) continue;
      if (!s.req.cache_shape.matches(*a->cache)) continue;
      const auto ids = eventual_ids(*a);
      if (ids.size() >= s.req.prompt.size() || common_prefix(ids, s.req.prompt) < ids.size()) continue;
      if (std::any_of(active_.begin(), active_.end(),
                      [&](const auto& w) { return w->phase == Phase::Waiting && w->source == a->id; }))
        continue;  // another sequence copies its prefix when it ends
      if (s.req.cache_shape.dense() && !a->cache->grow(s.req.cache_shape.capacity)) continue;
      s.cache = std::move(a->cache);
      start_after_prefix(s, a->in_cache.size());
      s.step->result().cached_tokens = ids.size();
      s.step->result().closing_tokens = ids.size() - a->in_cache.size();
      a->feed.clear();
      a->known = false;
      a->phase = Phase::Ended;
      return true;
    }
    return false;
  }

  void start_from_pool(Seq& s) {
    auto taken = pool_.take(s.req.prompt, s.req.cache_shape);
    s.cache = taken.cache ? std::move(taken.cache) : s.req.cache_shape.template make<Config>();
    start_after_prefix(s, taken.tokens);
  }

  void start_after_prefix(Seq& s, std::size_t tokens) {
    s.phase = Phase::Prefill;
    s.fed = tokens;
    s.in_cache.assign(s.req.prompt.begin(), s.req.prompt.begin() + static_cast<std::ptrdiff_t>(tokens));
    s.step->result().cached_tokens = tokens;
  }

  // What a running sequence's cache will hold soon: its prompt while it
  // prefills, then what it holds and the tokens about to go in.
  static std::vector<TokenId> eventual_ids(const Seq& a) {
    if (a.phase == Phase::Prefill) return a.req.prompt;
    std::vector<TokenId> ids = a.in_cache;
    if (a.phase == Phase::Decode) ids.push_back(a.step->last());
    if (a.phase == Phase::Closing) ids.insert(ids.end(), a.feed.begin(), a.feed.end());
    return ids;
  }

  // The running sequence whose cache will hold the longest prefix of s's prompt.
  std::pair<const Seq*, std::size_t> best_running_prefix(const Seq& s) const {
    const Seq* best = nullptr;
    std::size_t best_n = 0;
    const auto& prompt = s.req.prompt;
    for (const auto& a : active_) {
      if (!a->known || a->broken || !a->cache || a->phase == Phase::Waiting || a->phase == Phase::Ended) continue;
      if (!s.req.cache_shape.matches(*a->cache)) continue;
      const auto ids = eventual_ids(*a);
      const std::size_t n = std::min(common_prefix(prompt, ids), prompt.size() - 1);
      // A ring passes a point without stopping unless it is in its prefill
      // (whose chunks stop there, plan()) or that point is its end.
      const bool reachable =
          s.req.cache_shape.dense() || a->phase == Phase::Prefill || (a->phase == Phase::Closing && n == ids.size());
      if (reachable && n > best_n) {
        best = a.get();
        best_n = n;
      }
    }
    return {best, best_n};
  }

  // A waiting sequence copies its source's prefix once it is there, or
  // starts on its own when the source is gone (its cache kept, perhaps).
  void resolve_wait(Seq& s) {
    const Seq* src = nullptr;
    for (const auto& a : active_)
      if (a->id == s.source) src = a.get();
    if (src && !src->broken && src->cache && src->in_cache.size() >= s.wait_for) {
      const auto n = static_cast<std::int64_t>(s.wait_for);
      if (src->cache->can_truncate(n) && common_prefix(src->in_cache, s.req.prompt) >= s.wait_for) {
        s.cache = src->cache->copy_prefix(n, s.req.cache_shape.capacity);
        return start_after_prefix(s, s.wait_for);
      }
      return start_from_pool(s);  // it went past the point
    }
    if (!src || src->broken || src->phase == Phase::Ended) start_from_pool(s);
  }

  // This step's batch: one token per decoding sequence, then prefill chunks
  // in arrival order within what is left of the budget, and the tails of
  // closing sequences: with the others, or alone once due (closings_wait,
  // else at once).
  void plan(bool closings_wait) {
    batch_.clear();
    in_batch_.clear();
    std::size_t budget = opt_.step_tokens;
    auto add = [&](Seq& s) {
      batch_.push_back({s.cache.get(), s.feed, false});
      in_batch_.push_back(&s);
      budget -= std::min(budget, s.feed.size());
    };
    for (auto& sp : active_) {
      Seq& s = *sp;
      if (s.phase != Phase::Decode) continue;
      if (!s.cache->has_room(1)) {
        s.step->finish(StopReason::CacheFull);
        generation_over(s);  // closing now, below
        continue;
      }
      s.feed.assign(1, s.step->last());
      add(s);
    }
    for (auto& sp : active_) {
      Seq& s = *sp;
      if (s.phase != Phase::Prefill || budget == 0) continue;
      std::size_t n = std::min(budget, s.req.prompt.size() - s.fed);
      if (s.cache->kind() == Cache::Kind::SinkWindow)  // land exactly where a waiting sequence will copy
        for (const auto& w : active_)
          if (w->phase == Phase::Waiting && w->source == s.id && w->wait_for > s.fed) n = std::min(n, w->wait_for - s.fed);
      const auto first = s.req.prompt.begin() + static_cast<std::ptrdiff_t>(s.fed);
      s.feed.assign(first, first + static_cast<std::ptrdiff_t>(n));
      add(s);
    }
    const auto now = Clock::now();
    // A sequence waiting (for a prefix to copy) may wait for a closing.
    bool due = !batch_.empty() || !closings_wait || !accepting();
    for (const auto& sp : active_)
      due = due || sp->phase == Phase::Waiting || (sp->phase == Phase::Closing && sp->closes_by <= now);
    close_due_ = Clock::time_point::max();
    for (auto& sp : active_) {
      Seq& s = *sp;
      if (s.phase != Phase::Closing) continue;
      const auto room = static_cast<std::size_t>(std::max<std::int64_t>(0, s.cache->capacity() - s.cache->size()));
      if (s.cache->kind() == Cache::Kind::Dense && s.feed.size() > room) s.feed.resize(room);
      if (s.feed.empty())
        s.phase = Phase::Ended;
      else if (due)
        add(s);
      else
        close_due_ = std::min(close_due_, s.closes_by);
    }
  }

  bool accepting() const {
    std::lock_guard lock(mu_);
    return accepting_;
  }

  void run_batch() {
    typename Llama<Config>::Logits logits;
    try {
      logits = model_->forward(batch_);
    } catch (const std::exception& e) {
      // The forward itself failed (out of memory, say): the sequences of
      // this batch end with the error, their caches half written; the
      // scheduler goes on with the rest.
      for (Seq* s : in_batch_) {
        s->broken = true;
        s->step->fail(std::string("forward pass failed: ") + e.what());
        generation_over(*s);
      }
      return;
    }
    for (std::size_t i = 0; i < batch_.size(); ++i) {
      Seq& s = *in_batch_[i];
      s.in_cache.insert(s.in_cache.end(), s.feed.begin(), s.feed.end());
      if (s.phase == Phase::Closing) {
        s.phase = Phase::Ended;
        continue;
      }
      if (s.phase == Phase::Prefill) {
        s.fed += s.feed.size();
        if (s.fed < s.req.prompt.size()) continue;  // more of the prompt to come
        s.step->result().prefill_s = std::chrono::duration<double>(Clock::now() - s.submitted).count();
      }
      try {
        if (s.step->next(logits.last(i))) {
          s.phase = Phase::Decode;
          continue;
        }
      } catch (const std::exception& e) {  // this sequence's sampling failed (NaN logits, say)
        s.broken = true;
        s.step->fail(e.what());
      }
      generation_over(s);
    }
  }

  // The generation has ended: what is still to go into the cache before it
  // is kept (the last sampled token; the template's end of a chat answer).
  void generation_over(Seq& s) {
    s.feed.clear();
    const auto& res = s.step->result();
    const bool keep = pool_.enabled() && s.known && !s.broken && s.cache && res.stop != StopReason::Error;
    if (keep && s.phase != Phase::Waiting && s.fed == s.req.prompt.size() && !res.tokens.empty()) {
      if (s.req.answer_end.empty() || !tok_->ends_generation(res.tokens.back())) s.feed.push_back(res.tokens.back());
      s.feed.insert(s.feed.end(), s.req.answer_end.begin(), s.req.answer_end.end());
    }
    s.known = keep;
    s.phase = s.feed.empty() ? Phase::Ended : Phase::Closing;
    s.closes_by = Clock::now() + opt_.close_wait;
  }

  // Ended sequences leave: their caches are kept (or freed), and every
  // sequence whose generation ended this step is reported.
  void retire() {
    std::vector<const GenerationResult*> results;
    std::vector<const Request*> requests;
    for (auto& s : active_)
      if (s->step->done() && !s->reported) {
        s->reported = true;
        results.push_back(&s->step->result());
        requests.push_back(&s->req);
      }
    std::exception_ptr first;
    for (std::size_t i = 0; i < results.size(); ++i) {  // every one, even if an on_done throws
      if (!requests[i]->on_done) continue;
      try {
        requests[i]->on_done(*results[i]);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    for (auto it = active_.begin(); it != active_.end();) {
      if ((*it)->phase != Phase::Ended) {
        ++it;
        continue;
      }
      keep(**it);
      it = active_.erase(it);
    }
    publish();
    if (first) std::rethrow_exception(first);
  }

  void keep(Seq& s) {
    if (!s.known || !s.cache) return;
    std::string note = s.req.note ? s.req.note(s.step->result()) : std::string();
    pool_.put(std::move(s.cache), std::move(s.in_cache), std::move(note));
  }

  // After stop(): whatever had not ended ends now, cancelled and reported.
  void end_all() {
    std::deque<Incoming> left;
    {
      std::lock_guard lock(mu_);
      left.swap(incoming_);
      cancelled_.clear();
    }
    for (auto& in : left) report_unstarted(in);
    for (auto& s : active_) {
      if (!s->step->done()) s->step->finish(StopReason::Cancelled);
      if (s->phase != Phase::Ended) {
        generation_over(*s);
        s->feed.clear();  // no step left to feed it: keep what the cache holds
        s->phase = Phase::Ended;
      }
    }
    retire();
  }

  void publish() {
    std::size_t closing = 0, closing_bytes = 0;
    for (const auto& s : active_)
      if (s->phase == Phase::Closing) {
        ++closing;
        closing_bytes += s->known && s->cache ? s->cache->bytes() : 0;
      }
    std::lock_guard lock(mu_);
    closing_count_ = closing;
    active_count_ = active_.size() - closing;
    pool_bytes_ = pool_.bytes() + closing_bytes;
    pool_entries_ = pool_.entries() + closing;
  }

  Llama<Config>* model_;
  const Tokenizer* tok_;
  Options opt_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Incoming> incoming_;
  std::vector<SequenceId> cancelled_;
  SequenceId next_id_ = 0;
  std::size_t active_count_ = 0;
  std::atomic<std::size_t> closing_count_ = 0;
  std::atomic<std::size_t> pool_bytes_ = 0, pool_entries_ = 0;
  bool accepting_ = true;
  std::atomic<bool> stopping_ = false;
  std::thread worker_;

  // Owned by the stepping thread.
  CachePool<Config> pool_;
  std::vector<std::unique_ptr<Seq>> active_;
  std::vector<typename Llama<Config>::Sequence> batch_;
  std::vector<Seq*> in_batch_;
  Clock::time_point close_due_;  // the first waiting closing's time to run alone (plan())
};

}  // namespace streamllm
