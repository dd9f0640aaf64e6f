// What a Llama holding one shard of a model (tensor_shard.hpp) asks of the
// other ranks: where the shards' partial results meet. The link is an
// interface, so the model stays free of any transport; parallel/mpi_link.hpp
// is the one over MPI.
#pragma once

#include <cstddef>
#include <span>

#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/core/config.hpp"

namespace streamllm {

// One sequence's part of a forward call: its cache and the tokens to append
// (Llama<Config>::Sequence).
template <class Config>
struct ForwardSequence {
  KVCacheBase<Config>* cache = nullptr;
  std::span<const TokenId> tokens;
  bool all_logits = false;  // logits of every token, not only the last
};

template <class Config>
class ShardLink {
 public:
  virtual ~ShardLink() = default;

  // At the start of a forward call, after it was checked and before anything
  // changes: the first rank tells the others what to run (they run the same
  // call on their caches); the others do nothing. end_forward follows when
  // the call is done, also when it failed.
  virtual void begin_forward(std::span<const ForwardSequence<Config>> seqs) = 0;
  virtual void end_forward() noexcept = 0;

  // Sums n floats over the ranks, in place, on every rank: a layer's output
  // projection, whose every rank holds a part of each row's sum.
  virtual void sum(float* x, std::size_t n) = 0;

  // The same, always in f32 (whatever sum's precision), so that rows held
  // whole by one rank and zeros on the others arrive exactly: the embedding
  // rows of a forward call, each from the rank whose slice of the
  // vocabulary holds its token.
  virtual void sum_exact(float* x, std::size_t n) = 0;

  // Logits of `rows` tokens, each rank holding `cols` of each (its rows of
  // the classifier, which the link was set up with): the whole
  // rows x Config::Vocab on the first rank, at `out` (the others' is not written).
  virtual void gather_logits(const float* local, std::size_t rows, std::size_t cols, float* out) = 0;
};

}  // namespace streamllm
