// Rank r's slice of a model's weights (tensor_shard.hpp), cut from the
// file's as they are (before any repacking for the kernels):
//   rows of wq, wk, wv (its heads), of w_gate and w_up (its hidden slice), of
//   the classifier (its vocabulary slice, or all of it on rank 0) and of the
//   embedding table (the same vocabulary slice: a token's row comes from
//   the rank that holds it, one exact sum per forward call): views into the
//   mapped file, so a rank reads only its own;
//   columns of wo and w_down (the same heads and hidden slice): copied once,
//   whole blocks per row, into the rank's memory;
//   the norms: shared by every rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "streamllm/core/error.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/model/tensor_shard.hpp"
#include "streamllm/model/weights.hpp"

namespace streamllm {

// Where the classifier (Vocab x Dim, the largest matrix of a small model)
// runs: a slice of its rows on every rank, the logits gathered on rank 0;
// or all of it on rank 0, which then gathers nothing.
enum class ClassifierSplit { Sliced, OnFirstRank };

// Rank r's rows of the classifier.
template <class Config>
SliceBounds classifier_rows(int ranks, int rank, ClassifierSplit split) {
  if (split == ClassifierSplit::OnFirstRank) return rank == 0 ? SliceBounds{0, Config::Vocab} : SliceBounds{0, 0};
  // Whole groups of 16 rows where they divide: the repacked layouts interleave 16.
  return slice_bounds(Config::Vocab, ranks, rank, Config::Vocab % 16 == 0 ? 16 : 1);
}

// Rank r's rows of w_gate and w_up, which are its columns of w_down: whole
// blocks of w_down's type, uneven where they do not divide.
inline SliceBounds hidden_rows(const TensorView& w_down, int ranks, int rank) {
  return slice_bounds(w_down.cols, ranks, rank, traits(w_down.type).block_elems);
}

namespace detail {
struct ShardStorage {
  std::shared_ptr<const void> file;  // the whole model's views point here
  // Every column copy, one after another in one buffer: a buffer of 2 MiB
  // or more is rounded up to whole huge pages (memory.hpp), once here
  // rather than once per matrix (22 rounded w_down copies of TinyLlama's
  // Q4_0 shard were 20 MiB, a tenth of a rank's weights).
  AlignedVector<std::byte> columns;
};

inline TensorView row_slice(const TensorView& t, SliceBounds r) { return t.row_range(r.begin, r.end); }

// Takes a mapped file's pages of `t` out of this process (they stay in the
// page cache): copying a column slice reads every page of the matrix, and a
// rank's memory is to be its own slice, not the whole. Only for a mapping
// of the file: anonymous memory would lose its contents.
inline void unmap_file_pages(const TensorView& t) {
#if defined(__linux__)
  advise_whole_pages(t.data, static_cast<std::size_t>(t.bytes()), MADV_DONTNEED);
#else
  (void)t;
#endif
}

// The byte ranges a model's weights read: its matrices and its norms.
template <class Config>
std::vector<std::pair<const std::byte*, const std::byte*>> read_ranges(const ModelWeights<Config>& w) {
  std::vector<std::pair<const std::byte*, const std::byte*>> r;
  const auto view = [&](const TensorView& t) {
    if (t.data) r.emplace_back(t.data, t.data + t.bytes());
  };
  const auto norm = [&](const float* n) {
    if (n) r.emplace_back(reinterpret_cast<const std::byte*>(n), reinterpret_cast<const std::byte*>(n + Config::Dim));
  };
  view(w.token_embedding);
  view(w.classifier);
  norm(w.final_norm);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) view(*m);
    norm(l.attn_norm);
    norm(l.ffn_norm);
  }
  return r;
}

// Takes every page of the mapped file's tensors that the shard does not
// read out of this process (they stay in the page cache). Releasing each
// matrix's own pages once copied is not enough: a fault maps the 64 KiB of
// cached file around it, so reading a slice's last rows maps the first rows
// of the next rank's slice too (11 MiB of TinyLlama's Q4_0 rank, 0.55x the
// one process's memory instead of 0.53x).
template <class Full, class Shard>
void release_unread_file_pages(const ModelWeights<Full>& full, const ModelWeights<Shard>& shard) {
#if defined(__linux__)
  const auto file = read_ranges(full);
  if (file.empty()) return;
  const std::byte *lo = file[0].first, *hi = file[0].second;
  for (const auto& [b, e] : file) {
    lo = std::min(lo, b);
    hi = std::max(hi, e);
  }
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto address = [](const std::byte* p) { return reinterpret_cast<std::uintptr_t>(p); };
  std::vector<std::pair<const std::byte*, const std::byte*>> kept;
  for (const auto& [b, e] : read_ranges(shard))
    if (b < hi && e > lo) kept.emplace_back(std::max(b, lo), std::min(e, hi));
  kept.emplace_back(hi, hi);
  std::sort(kept.begin(), kept.end());
  std::uintptr_t from = address(lo);  // the start of the next gap
  for (const auto& [b, e] : kept) {
    const std::uintptr_t gap_end = address(b) / page * page;  // the pages kept start here
    if (from < gap_end) advise_whole_pages(reinterpret_cast<const void*>(from), gap_end - from, MADV_DONTNEED);
    from = std::max(from, (address(e) + page - 1) / page * page);
  }
#else
  (void)full;
  (void)shard;
#endif
}

// One matrix's columns [cols.begin, cols.end) of every row, to be copied
// into `to`.
struct ColumnCut {
  const TensorView* from;
  SliceBounds cols;
  TensorView* to;
  std::string what;  // "layer 3 wo", for errors

  std::int64_t row_bytes_kept() const { return row_bytes(from->type, cols.size()); }
  // The cut must fall between blocks.
  void check() const {
    const std::int64_t block = traits(from->type).block_elems;
    if (cols.begin % block != 0 || cols.end % block != 0)
      throw InputError("tensor parallel: " + what + " would be cut at columns " + std::to_string(cols.begin) + ".." +
                       std::to_string(cols.end) + ", inside a block of " + std::to_string(block) + " (" +
                       std::string(dtype_name(from->type)) + "); use fewer ranks, or weights of a type with smaller blocks");
  }
};

// Copies every cut, whole blocks per row, into one buffer of `storage`
// (each copy starting on a cache line).
inline void copy_columns(const std::vector<ColumnCut>& cuts, ShardStorage& storage, bool mapped) {
  constexpr std::int64_t kLine = 64;
  std::int64_t total = 0;
  for (const ColumnCut& c : cuts) {
    c.check();
    total += (c.from->rows * c.row_bytes_kept() + kLine - 1) / kLine * kLine;
  }
  storage.columns.resize(static_cast<std::size_t>(total));
  std::byte* out = storage.columns.data();
  for (const ColumnCut& c : cuts) {
    const TensorView& t = *c.from;
    const std::int64_t skip = row_bytes(t.type, c.cols.begin), bytes = c.row_bytes_kept();
    for (std::int64_t r = 0; r < t.rows; ++r) std::memcpy(out + r * bytes, t.row(r) + skip, static_cast<std::size_t>(bytes));
    if (mapped) unmap_file_pages(t);
    *c.to = {t.type, out, t.rows, c.cols.size(), bytes};
    out += (t.rows * bytes + kLine - 1) / kLine * kLine;
  }
}
}  // namespace detail

// Rank `rank`'s shard of `full`, as the file has it, or (ForKernels)
// passed through prepare_weights. `mapped`: full's views are of a mapped
// file (LoadMode::Mapped), whose pages of the column-sliced matrices are
// let go after the copy. Throws InputError where a slice would cut a block.
template <class Config, int Ranks>
ModelWeights<TensorShard<Config, Ranks>> shard_weights(const ModelWeights<Config>& full, int rank,
                                                       ClassifierSplit split = ClassifierSplit::Sliced, bool mapped = false,
                                                       WeightLayout layout = WeightLayout::AsInFile) {
  using Shard = TensorShard<Config, Ranks>;
  if (rank < 0 || rank >= Ranks)
    throw InputError("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(Ranks));
  auto storage = std::make_shared<detail::ShardStorage>();
  storage->file = full.owner;
  const SliceBounds q{rank * Shard::QDim, (rank + 1) * Shard::QDim}, kv{rank * Shard::KVDim, (rank + 1) * Shard::KVDim};

  ModelWeights<Shard> w;
  std::vector<detail::ColumnCut> cuts;
  // The embedding's rows in the sliced classifier's slices (whatever the
  // classifier's split): with the default split, a tied table's pages on a
  // rank are then the ones its classifier rows read. Replicated, a prefill of
  // scattered tokens mapped much of the table into every rank.
  const SliceBounds vocab = classifier_rows<Config>(Ranks, rank, ClassifierSplit::Sliced);
  w.token_embedding = detail::row_slice(full.token_embedding, vocab);
  w.first_token = static_cast<TokenId>(vocab.begin);
  for (std::size_t l = 0; l < full.layers.size(); ++l) {
    const LayerWeights& f = full.layers[l];
    LayerWeights& s = w.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    s.attn_norm = f.attn_norm;
    s.ffn_norm = f.ffn_norm;
    s.wq = detail::row_slice(f.wq, q);
    s.wk = detail::row_slice(f.wk, kv);
    s.wv = detail::row_slice(f.wv, kv);
    cuts.push_back({&f.wo, q, &s.wo, at + "wo"});
    const SliceBounds h = hidden_rows(f.w_down, Ranks, rank);
    s.w_gate = detail::row_slice(f.w_gate, h);
    s.w_up = detail::row_slice(f.w_up, h);
    cuts.push_back({&f.w_down, h, &s.w_down, at + "w_down"});
  }
  detail::copy_columns(cuts, *storage, mapped);
  w.final_norm = full.final_norm;
  w.classifier = detail::row_slice(full.classifier, classifier_rows<Config>(Ranks, rank, split));
  w.hparams = full.hparams;
  w.source = full.source;
  w.owner = storage;
  if (layout == WeightLayout::ForKernels) w = prepare_weights(std::move(w));
  if (mapped) detail::release_unread_file_pages(full, w);
  if (layout == WeightLayout::AsInFile) return w;
  // The column copies the kernels' repacking replaced are read no more: let
  // them go, or a rank holds its wo and w_down twice (on AVX-512, Q8_0 and
  // Q4_0 are repacked).
  const auto begin = reinterpret_cast<std::uintptr_t>(storage->columns.data()), end = begin + storage->columns.size();
  bool read = false;
  for (const LayerWeights& l : w.layers)
    for (const TensorView* m : {&l.wo, &l.w_down}) {
      const auto at = reinterpret_cast<std::uintptr_t>(m->data);
      read = read || (at >= begin && at < end);
    }
  if (!read) AlignedVector<std::byte>().swap(storage->columns);
  return w;
}

}  // namespace streamllm
