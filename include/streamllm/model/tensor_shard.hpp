// One process's part of a model split tensor-parallel across `Ranks`
// processes (Megatron-LM, Shoeybi et al. 2019): each holds the query and KV
// heads of its group and a slice of the feed-forward hidden size, so every
// matrix of a layer is cut, and the layer's two output projections (wo and
// w_down) give partial sums that one all-reduce each completes.
//
// TensorShard<Config, Ranks> is that part's compile-time shape: the model's
// width, layers, vocabulary and context, its own heads. A Llama, its caches
// and every front end above them take it as they take a whole model's
// config; a cache of a shard holds only its heads' keys and values.
#pragma once

#include <algorithm>
#include <cstdint>

#include "streamllm/core/config.hpp"

namespace streamllm {

template <class Config, int Ranks_>
struct TensorShard {
  using Full = Config;
  static constexpr int Ranks = Ranks_;
  static_assert(Ranks >= 1, "a model is split over at least one rank");
  static_assert(Config::KVHeads % Ranks == 0, "the number of ranks must divide the model's KV heads");

  static constexpr int Dim = Config::Dim;
  // The whole model's: a rank's slice is the rows its weights have, not the
  // same on every rank where the blocks of 32 or 256 do not divide evenly.
  static constexpr int HiddenDim = Config::HiddenDim;
  static constexpr int Layers = Config::Layers;
  static constexpr int Heads = Config::Heads / Ranks;
  static constexpr int KVHeads = Config::KVHeads / Ranks;
  static constexpr int Vocab = Config::Vocab;
  static constexpr int MaxSeq = Config::MaxSeq;

  static constexpr int HeadDim = Config::HeadDim;
  static constexpr int QDim = Heads * HeadDim;
  static constexpr int KVDim = KVHeads * HeadDim;
  static constexpr int GroupSize = Config::GroupSize;

  // The shard's own heads: not the file's shape, so nothing made for a whole
  // model (a cache file) is taken for a shard's.
  static constexpr ModelShape shape() { return {Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, MaxSeq}; }
};

// Rank r's part [begin, end) of `total` things cut into `parts`, in units of
// `unit` (a weight type's block, so column slices stay whole blocks): the
// first ranks take one unit more where the units do not divide evenly.
struct SliceBounds {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
inline SliceBounds slice_bounds(std::int64_t total, int parts, int rank, std::int64_t unit = 1) {
  const std::int64_t units = total / unit, base = units / parts, extra = units % parts;
  auto start = [&](int r) { return (r * base + std::min<std::int64_t>(r, extra)) * unit; };
  return {start(rank), rank + 1 == parts ? total : start(rank + 1)};
}

}  // namespace streamllm
