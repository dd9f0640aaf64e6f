// One model split tensor-parallel across the processes of an MPI job
// (`mpirun -np P program ...`): each rank loads its shard of the same file
// (shard/shard_weights.hpp); rank 0 runs the model as any other, the others
// follow it (mpi_link.hpp).
//
//   streamllm::parallel::MpiRuntime mpi(argc, argv);
//   streamllm::parallel::TensorParallelModel<presets::TinyLlama1B, 2> tp(mpi, "model.gguf");
//   if (!tp.leads()) { tp.follow(); return 0; }
//   auto& model = tp.model();   // a Llama<TensorShard<TinyLlama1B, 2>>: prefill, decode, a scheduler ...
//
// The library's core never includes this folder: a program that does not
// split a model needs no MPI.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/loaders/model_file.hpp"
#include "streamllm/loaders/shard_weights.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/model/tensor_shard.hpp"
#include "streamllm/parallel/mpi_link.hpp"
#include "streamllm/parallel/mpi_runtime.hpp"

namespace streamllm::parallel {

struct TensorParallelOptions {
  ClassifierSplit classifier = ClassifierSplit::Sliced;
  AllReducePrecision all_reduce = AllReducePrecision::F32;
  LoadMode mode = LoadMode::Mapped;
};

// Throws, on every rank alike, unless `ranks` processes can split a model
// with `kv_heads` KV heads.
inline void check_ranks(int ranks, std::int64_t kv_heads) {
  if (ranks < 1 || kv_heads % ranks != 0)
    throw InputError("tensor parallel: " + std::to_string(ranks) + " ranks do not divide the model's " +
                     std::to_string(kv_heads) + " KV heads; run with a number of processes that does (mpirun -np N)");
}

template <class Config, int Ranks>
class TensorParallelModel {
 public:
  using Shard = TensorShard<Config, Ranks>;

  // Every rank of the job: loads its shard of `path`. If any rank cannot
  // (a missing file, a shape that is not Config's, a job of another size),
  // every rank throws the same Error, naming the rank.
  TensorParallelModel(const MpiRuntime& mpi, const std::string& path, TensorParallelOptions opt = {}) {
    on_every_rank(mpi.comm(), [&] {
      if (mpi.size() != Ranks)
        throw InputError("tensor parallel: this model is split " + std::to_string(Ranks) + " ways, the job has " +
                         std::to_string(mpi.size()) + " processes");
      const bool mapped = opt.mode == LoadMode::Mapped;
      model_ = std::make_unique<Llama<Shard>>(
          shard_weights<Config, Ranks>(load_weights<Config>(path, opt.mode, WeightLayout::AsInFile), mpi.rank(), opt.classifier,
                                       mapped, WeightLayout::ForKernels));
    });
    std::vector<SliceBounds> vocab;
    for (int r = 0; r < Ranks; ++r) vocab.push_back(classifier_rows<Config>(Ranks, r, opt.classifier));
    link_ = std::make_unique<MpiShardLink<Shard>>(mpi.comm(), std::move(vocab), opt.all_reduce);
    model_->set_shard_link(link_.get());
  }
  // The link goes first (members go in reverse order): on rank 0 it stops
  // the others, whose follow() returns; then the model, unused since.
  ~TensorParallelModel() = default;
  TensorParallelModel(const TensorParallelModel&) = delete;
  TensorParallelModel& operator=(const TensorParallelModel&) = delete;

  // Rank 0 runs the model; the others follow.
  bool leads() const { return link_->rank() == 0; }
  Llama<Shard>& model() {
    if (!leads()) throw InputError("tensor parallel: only rank 0 runs the model; the other ranks call follow()");
    return *model_;
  }
  // This rank's shard of the weights, on every rank.
  const ModelWeights<Shard>& weights() const { return model_->weights(); }
  // What the ranks' meetings cost so far on this rank (the benchmarks).
  const LinkStats& link_stats() const { return link_->stats(); }
  void reset_link_stats() { link_->reset_stats(); }

  // Ranks other than 0: runs rank 0's calls until rank 0's model goes.
  void follow() {
    if (leads()) throw InputError("tensor parallel: rank 0 runs the model; follow() is for the other ranks");
    link_->follow(*model_);
  }

 private:
  std::unique_ptr<Llama<Shard>> model_;
  std::unique_ptr<MpiShardLink<Shard>> link_;
};

}  // namespace streamllm::parallel
