// The ranks of a model split tensor-parallel (shard/) meeting over MPI.
//
// Rank 0 leads: it runs the front ends (the scheduler, the server, chat) on
// its shard as on any model, and each forward call it makes is sent to the
// other ranks first, as a plan: for every sequence, its cache's id, the
// cache's size (so a cache cut back is cut back everywhere), its tokens.
// The others follow: they keep a cache of their own heads for each id and
// run the same call. A cache rank 0 copies or ends is copied or ended on
// every rank (KVCacheBase::Mirror). Inside a call the ranks meet twice per
// layer (MPI_Allreduce of rows x Dim floats) and once for the logits
// (MPI_Gatherv of each rank's vocabulary slice to rank 0).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/core/dtype.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/model/shard_link.hpp"
#include "streamllm/model/tensor_shard.hpp"
#include "streamllm/parallel/mpi_runtime.hpp"

namespace streamllm::parallel {

// The precision of the layers' all-reduce: f32 (exact up to the order of the
// sum) or bf16 (half the bytes; each rank's part and the sum rounded).
enum class AllReducePrecision { F32, BF16 };

// Time and bytes of the ranks' meetings on one rank, for benchmarks.
struct LinkStats {
  double all_reduce_s = 0;  // in the layers' all-reduces
  std::uint64_t all_reduce_calls = 0, all_reduce_bytes = 0;
  double gather_s = 0;  // gathering the logits
  double plan_s = 0;    // rank 0 sending the plans

  LinkStats& operator+=(const LinkStats& o) {
    all_reduce_s += o.all_reduce_s;
    all_reduce_calls += o.all_reduce_calls;
    all_reduce_bytes += o.all_reduce_bytes;
    gather_s += o.gather_s;
    plan_s += o.plan_s;
    return *this;
  }
};

namespace detail {
enum Message : std::int64_t { kForward = 1, kCopy = 2, kDrop = 3, kStop = 4 };

// One forward call as rank 0 sends it to the others (words of a broadcast):
// kForward, the number of sequences, then per sequence its cache (the id
// every rank knows it by, whether it is new, its kind and sizes, the tokens
// it holds), whether the call wants all its logits, and its tokens. Encoded
// and decoded here, field by field in the same order.
struct ForwardPlan {
  struct Sequence {
    std::int64_t cache_id = 0;
    bool new_cache = false, dense = true;
    std::int64_t capacity = 0, sinks = 0, window = 0;  // window: 0 for a dense cache
    KVTypes types;                                     // every rank holds its heads in rank 0's types
    std::int64_t size = 0;                             // tokens in the cache before the call
    bool all_logits = false;
    std::span<const TokenId> tokens;
  };
  static constexpr std::size_t kSequenceWords = 10;  // a sequence's fields before its tokens

  // Rank 0: the message of these sequences into `words` (reused: once per token).
  static void encode(std::span<const Sequence> seqs, std::vector<std::int64_t>& words) {
    words.assign({kForward, static_cast<std::int64_t>(seqs.size())});
    for (const Sequence& q : seqs) {
      words.insert(words.end(), {q.cache_id, q.new_cache ? 1 : 0, q.dense ? 0 : 1, q.capacity, q.sinks, q.window,
                                 static_cast<std::int64_t>(q.types.k) << 8 | static_cast<std::int64_t>(q.types.v), q.size,
                                 static_cast<std::int64_t>(q.tokens.size()), q.all_logits ? 1 : 0});
      words.insert(words.end(), q.tokens.begin(), q.tokens.end());
    }
  }

  // The others: the sequences of a kForward message, their tokens in `tokens`
  // (reused). A message that does not hold what it says is an Error.
  static void decode(const std::vector<std::int64_t>& words, std::vector<Sequence>& seqs, std::vector<TokenId>& tokens) {
    const auto n = static_cast<std::size_t>(words.at(1));
    if (n > (words.size() - 2) / kSequenceWords) throw Error("a forward plan from rank 0 names more sequences than it holds");
    seqs.assign(n, {});
    std::vector<std::size_t> first(n);
    tokens.clear();
    std::size_t at = 2;
    for (std::size_t s = 0; s < n; ++s) {
      Sequence& q = seqs[s];
      if (at + kSequenceWords > words.size()) throw Error("a forward plan from rank 0 ends inside sequence " + std::to_string(s));
      q.cache_id = words[at];
      q.new_cache = words[at + 1] != 0;
      q.dense = words[at + 2] == 0;
      q.capacity = words[at + 3];
      q.sinks = words[at + 4];
      q.window = words[at + 5];
      const std::int64_t types = words[at + 6], last = static_cast<std::int64_t>(KVType::Q4_0);
      if ((types >> 8) > last || (types & 255) > last || types < 0)
        throw Error("a forward plan from rank 0 names an unknown KV cache type (" + std::to_string(types) + ")");
      q.types = {static_cast<KVType>(types >> 8), static_cast<KVType>(types & 255)};
      q.size = words[at + 7];
      const auto count = static_cast<std::size_t>(words[at + 8]);
      q.all_logits = words[at + 9] != 0;
      at += kSequenceWords;
      if (count > words.size() - at)
        throw Error("a forward plan from rank 0 ends inside sequence " + std::to_string(s) + "'s tokens");
      first[s] = tokens.size();
      for (std::size_t i = 0; i < count; ++i) tokens.push_back(static_cast<TokenId>(words[at++]));
    }
    for (std::size_t s = 0; s < n; ++s)  // spans once `tokens` no longer grows
      seqs[s].tokens = std::span<const TokenId>(tokens).subspan(first[s], (s + 1 < n ? first[s + 1] : tokens.size()) - first[s]);
  }
};

// bf16 sum for MPI_Allreduce: MPI has no 16-bit float type of its own.
inline void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// Rank 0's side, shared with the caches it mirrors (which may outlive the
// link: after stop() their ends are no one's business).
struct Leader {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex turn;  // one message or forward call at a time, whichever thread
  bool stopped = false;
  std::uint64_t next_id = 0;

  void send(std::vector<std::int64_t> words) { broadcast_words(comm, words); }
};

template <class Config>
class CacheMirror final : public KVCacheBase<Config>::Mirror {
 public:
  explicit CacheMirror(std::shared_ptr<Leader> leader) : leader_(std::move(leader)) {}

  void copied(std::uint64_t from_id, KVCacheBase<Config>& to, std::int64_t n) override {
    const std::lock_guard lock(leader_->turn);
    if (leader_->stopped) return;
    const std::uint64_t id = ++leader_->next_id;
    leader_->send({kCopy, static_cast<std::int64_t>(from_id), static_cast<std::int64_t>(id), n, to.capacity()});
    to.set_mirror(self_.lock(), id);
  }
  void dropped(std::uint64_t id) noexcept override {
    const std::lock_guard lock(leader_->turn);
    if (leader_->stopped) return;
    try {
      leader_->send({kDrop, static_cast<std::int64_t>(id)});
    } catch (const std::exception& e) {  // a destructor's: nothing to throw to
      std::fprintf(stderr, "streamllm: telling the other ranks that cache %llu ended failed: %s\n",
                   static_cast<unsigned long long>(id), e.what());
    }
  }

  std::weak_ptr<CacheMirror> self_;

 private:
  std::shared_ptr<Leader> leader_;
};
}  // namespace detail

template <class Config>  // a TensorShard
class MpiShardLink final : public ShardLink<Config> {
 public:
  using Cache = KVCacheBase<Config>;

  // `vocab[r]`: rank r's rows of the classifier (shard_weights.hpp).
  MpiShardLink(MPI_Comm comm, std::vector<SliceBounds> vocab, AllReducePrecision precision)
      : comm_(comm), vocab_(std::move(vocab)), precision_(precision) {
    MPI_Comm_rank(comm_, &rank_);
    if (precision_ == AllReducePrecision::BF16) check_mpi(MPI_Op_create(&detail::bf16_sum, 1, &bf16_sum_), "MPI_Op_create");
    if (rank_ == 0) {
      leader_ = std::make_shared<detail::Leader>();
      leader_->comm = comm_;
      mirror_ = std::make_shared<detail::CacheMirror<Config>>(leader_);
      mirror_->self_ = mirror_;
    }
  }
  ~MpiShardLink() override {
    try {
      stop();
    } catch (const std::exception& e) {  // a destructor's: nothing to throw to; the others see the job end
      std::fprintf(stderr, "streamllm: stopping the other ranks failed: %s\n", e.what());
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (bf16_sum_ != MPI_OP_NULL && !finalized) MPI_Op_free(&bf16_sum_);
  }
  MpiShardLink(const MpiShardLink&) = delete;
  MpiShardLink& operator=(const MpiShardLink&) = delete;

  int rank() const { return rank_; }
  const LinkStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  // Rank 0: tells the other ranks there will be no more calls (their
  // follow() returns). Called by the destructor too.
  void stop() {
    if (!leader_) return;
    const std::lock_guard lock(leader_->turn);
    if (leader_->stopped) return;
    leader_->stopped = true;
    leader_->send({detail::kStop});
  }

  void begin_forward(std::span<const ForwardSequence<Config>> seqs) override {
    if (!leader_) return;
    for (std::size_t s = 0; s < seqs.size(); ++s)
      if (seqs[s].cache->mirror_id() == 0 && seqs[s].cache->size() > 0)
        throw InputError("tensor parallel: the cache of sequence " + std::to_string(s) + " holds " +
                         std::to_string(seqs[s].cache->size()) +
                         " tokens the other ranks never saw (filled by another model, or loaded from a file); "
                         "give a split model empty caches, or copies of its own");
    leader_->turn.lock();
    if (leader_->stopped) {
      leader_->turn.unlock();
      throw InputError("tensor parallel: the other ranks were stopped; this model runs no more calls");
    }
    // One buffer for every plan: this runs once per generated token.
    plan_seqs_.clear();
    for (const ForwardSequence<Config>& seq : seqs) {
      Cache& c = *seq.cache;
      const bool is_new = c.mirror_id() == 0;
      if (is_new) c.set_mirror(mirror_, ++leader_->next_id);
      const bool dense = c.kind() == Cache::Kind::Dense;
      plan_seqs_.push_back({static_cast<std::int64_t>(c.mirror_id()), is_new, dense, c.capacity(), c.sinks(),
                            dense ? 0 : c.window(), c.types(), c.size(), seq.all_logits, seq.tokens});
    }
    detail::ForwardPlan::encode(plan_seqs_, plan_);
    try {
      const Timer t(stats_.plan_s);
      broadcast_words(comm_, plan_);
    } catch (...) {
      leader_->turn.unlock();
      throw;
    }
  }
  void end_forward() noexcept override {
    if (leader_) leader_->turn.unlock();
  }

  void sum(float* x, std::size_t n) override { sum_in_chunks(x, n, precision_); }

  // The embedding rows: one rank's value and zeros elsewhere, so f32 makes
  // the sum exact whatever the precision chosen for the layers.
  void sum_exact(float* x, std::size_t n) override { sum_in_chunks(x, n, AllReducePrecision::F32); }

  void gather_logits(const float* local, std::size_t rows, std::size_t cols, float* out) override {
    if (cols != static_cast<std::size_t>(vocab_[static_cast<std::size_t>(rank_)].size()))
      throw Error("tensor parallel: rank " + std::to_string(rank_) + " computed " + std::to_string(cols) +
                  " logits per token, its vocabulary slice has " +
                  std::to_string(vocab_[static_cast<std::size_t>(rank_)].size()));
    std::vector<int>& counts = gather_counts_;  // reused: once per generated token
    std::vector<int>& offsets = gather_offsets_;
    counts.clear();
    offsets.clear();
    int total = 0;
    for (const SliceBounds& v : vocab_) {
      counts.push_back(static_cast<int>(rows * static_cast<std::size_t>(v.size())));
      offsets.push_back(total);
      total += counts.back();
    }
    if (rank_ == 0) gathered_.resize(static_cast<std::size_t>(total));
    const Timer t(stats_.gather_s);
    check_mpi(MPI_Gatherv(local, static_cast<int>(rows * cols), MPI_FLOAT, gathered_.data(), counts.data(), offsets.data(),
                          MPI_FLOAT, 0, comm_),
              "MPI_Gatherv (logits)");
    if (rank_ != 0) return;
    constexpr auto V = static_cast<std::size_t>(Config::Vocab);
    for (std::size_t r = 0; r < vocab_.size(); ++r) {
      const auto n = static_cast<std::size_t>(vocab_[r].size()), first = static_cast<std::size_t>(vocab_[r].begin);
      const float* from = gathered_.data() + offsets[r];
      for (std::size_t i = 0; i < rows; ++i) std::memcpy(out + i * V + first, from + i * n, n * sizeof(float));
    }
  }

  // Ranks other than 0: runs rank 0's calls on `model` (whose link this is)
  // until rank 0 stops. A call that fails here cannot be finished by the
  // others: the job is ended (MPI_Abort) with the reason.
  void follow(Llama<Config>& model) {
    try {
      follow_plans(model);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "streamllm: rank %d cannot follow rank 0 and ends the job: %s\n", rank_, e.what());
      std::fflush(stderr);
      MPI_Abort(comm_, 1);
    }
  }

 private:
  // Adds the seconds of its life to `into`.
  struct Timer {
    double& into;
    double start = MPI_Wtime();
    explicit Timer(double& i) : into(i) {}
    ~Timer() { into += MPI_Wtime() - start; }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
  };

  void follow_plans(Llama<Config>& model) {
    std::unordered_map<std::int64_t, std::unique_ptr<Cache>> caches;
    auto cache = [&](std::int64_t id) -> Cache& {
      const auto it = caches.find(id);
      if (it == caches.end()) throw Error("rank 0 named cache " + std::to_string(id) + ", which this rank does not hold");
      return *it->second;
    };
    std::vector<std::int64_t> msg;
    std::vector<detail::ForwardPlan::Sequence> plan;
    std::vector<TokenId> tokens;
    std::vector<ForwardSequence<Config>> seqs;
    for (;;) {
      broadcast_words(comm_, msg);
      if (msg.empty()) throw Error("an empty message from rank 0");
      switch (msg[0]) {
        case detail::kStop: return;
        case detail::kDrop: caches.erase(msg.at(1)); break;
        case detail::kCopy: caches[msg.at(2)] = cache(msg.at(1)).copy_prefix(msg.at(3), msg.at(4)); break;
        case detail::kForward: {
          detail::ForwardPlan::decode(msg, plan, tokens);
          seqs.assign(plan.size(), {});
          for (std::size_t s = 0; s < plan.size(); ++s) {
            const detail::ForwardPlan::Sequence& q = plan[s];
            if (q.new_cache) {
              if (q.dense)
                caches[q.cache_id] = std::make_unique<DynamicKVCache<Config>>(q.capacity, q.types);
              else
                caches[q.cache_id] = std::make_unique<DynamicSinkWindowKVCache<Config>>(q.sinks, q.window, q.types);
            }
            Cache& c = cache(q.cache_id);
            if (q.dense && !c.grow(q.capacity))  // rank 0's grew in place (a conversation taken from the pool)
              throw Error("cache " + std::to_string(q.cache_id) + " cannot grow to " + std::to_string(q.capacity) +
                          " positions here");
            if (c.size() < q.size)
              throw Error("cache " + std::to_string(q.cache_id) + " holds " + std::to_string(c.size()) + " tokens here, " +
                          std::to_string(q.size) + " on rank 0");
            c.truncate(q.size);
            seqs[s] = {&c, q.tokens, q.all_logits};
          }
          model.forward(seqs);
          break;
        }
        default: throw Error("an unknown message " + std::to_string(msg[0]) + " from rank 0");
      }
    }
  }

  MPI_Comm comm_;
  int rank_ = 0;
  // At most this many bytes per MPI_Allreduce. For large messages OpenMPI
  // reduces by scatter then gather, with a temporary buffer the size of the
  // message that the allocator then keeps (64 MiB for 4096 rows of
  // Llama-2-7B); chunks of 1 MiB keep most of one call's bandwidth.
  static constexpr std::size_t kAllReduceBytes = std::size_t(1) << 20;

  void sum_in_chunks(float* x, std::size_t n, AllReducePrecision precision) {
    const Timer t(stats_.all_reduce_s);
    const std::size_t width = precision == AllReducePrecision::F32 ? 4 : 2, chunk = kAllReduceBytes / width;
    stats_.all_reduce_bytes += n * width;
    for (std::size_t at = 0; at < n; at += chunk) {
      ++stats_.all_reduce_calls;
      sum_chunk(x + at, std::min(chunk, n - at), precision);
    }
  }

  void sum_chunk(float* x, std::size_t n, AllReducePrecision precision) {
    if (precision == AllReducePrecision::F32) {
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce");
      return;
    }
    half_.resize(n);
    for (std::size_t i = 0; i < n; ++i) half_[i] = f32_to_bf16(x[i]);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, half_.data(), static_cast<int>(n), MPI_UINT16_T, bf16_sum_, comm_),
              "MPI_Allreduce (bf16)");
    for (std::size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(half_[i]);
  }

  std::vector<SliceBounds> vocab_;
  AllReducePrecision precision_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::vector<std::uint16_t> half_;
  std::vector<float> gathered_;
  std::vector<int> gather_counts_, gather_offsets_;
  std::vector<std::int64_t> plan_;
  std::vector<detail::ForwardPlan::Sequence> plan_seqs_;
  LinkStats stats_;
  std::shared_ptr<detail::Leader> leader_;
  std::shared_ptr<detail::CacheMirror<Config>> mirror_;
};

}  // namespace streamllm::parallel
