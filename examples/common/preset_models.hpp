// The model of every preset, and its loader, are compiled once for all the
// example programs, each preset in a unit of its own (preset_<name>.cpp,
// which CMake makes from STREAMLLM_FOR_EACH_PRESET), so that a new shape
// adds a unit rather than slowing one. Each program dispatches
// over every preset (with_preset), and without these declarations each would
// compile every preset's forward pass, with every kernel under it, and its
// loader again. A program of your own can do the same for the shapes it uses.
#pragma once

#include <string>
#include <type_traits>

#include "streamllm/loaders/model_file.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/model/presets.hpp"

#define STREAMLLM_EXAMPLES_EXTERN_MODEL(P)                       \
  extern template class streamllm::Llama<streamllm::presets::P>; \
  extern template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);
STREAMLLM_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_EXTERN_MODEL)
#undef STREAMLLM_EXAMPLES_EXTERN_MODEL

// The explicit instantiation the extern declarations above promise.
#define STREAMLLM_EXAMPLES_INSTANTIATE(P)                 \
  template class streamllm::Llama<streamllm::presets::P>; \
  template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);

// Tensor parallel (common/model_job.hpp): in an MPI job the examples split
// the models of these presets over the process counts given (each divides
// the preset's KV heads); every split's model and loading is compiled once,
// in a unit of its own (shard_<preset>_<ranks>.cpp, made by CMake from this
// list). Only the shapes worth splitting, and stories260K for the tests:
// each split costs every front end a compile of its code again.
#define STREAMLLM_EXAMPLES_FOR_EACH_SHARD(X)                                                                  \
  X(Stories260K, 2) X(Stories260K, 4) X(TinyLlama1B, 2) X(TinyLlama1B, 4) X(Llama2_7B, 2) X(Llama2_7B, 4) \
  X(Llama2_7B, 8) X(Llama2_13B, 2) X(Llama2_13B, 4) X(Llama2_13B, 8) X(Llama3_1_8B, 2) X(Llama3_1_8B, 4)  \
  X(Llama3_1_8B, 8) X(Mistral7B, 2) X(Mistral7B, 4) X(Mistral7B, 8)

namespace examples {

// f(config, ranks) for the split of `shape` over `ranks` processes, a
// std::integral_constant; throws, listing the splits there are, for none.
template <class F>
decltype(auto) with_sharded_preset(const streamllm::ModelShape& shape, int ranks, F&& f, bool match_max_seq) {
  using namespace streamllm::presets;
  auto is = [&](const streamllm::ModelShape& p) {
    streamllm::ModelShape s = shape;
    if (!match_max_seq) s.max_seq = p.max_seq;
    return s == p;
  };
  std::string splits;
#define STREAMLLM_EXAMPLES_TRY_SHARD(P, R)                     \
  splits += "\n  " #P " (" + P::shape().to_string() + ") over " #R; \
  if (is(P::shape()) && ranks == R) return f(P{}, std::integral_constant<int, R>{});
  STREAMLLM_EXAMPLES_FOR_EACH_SHARD(STREAMLLM_EXAMPLES_TRY_SHARD)
#undef STREAMLLM_EXAMPLES_TRY_SHARD
  throw streamllm::Error("the example programs have no split of the shape " + shape.to_string() + " over " +
                         std::to_string(ranks) + " processes; they split:" + splits +
                         "\nA program of your own can split any shape over any number that divides its KV heads.");
}
}  // namespace examples

#if defined(STREAMLLM_EXAMPLES_MPI)
#include "streamllm/parallel/tensor_parallel.hpp"
#define STREAMLLM_EXAMPLES_EXTERN_SHARD(P, R)                                               \
  extern template class streamllm::Llama<streamllm::TensorShard<streamllm::presets::P, R>>; \
  extern template class streamllm::parallel::TensorParallelModel<streamllm::presets::P, R>;
STREAMLLM_EXAMPLES_FOR_EACH_SHARD(STREAMLLM_EXAMPLES_EXTERN_SHARD)
#undef STREAMLLM_EXAMPLES_EXTERN_SHARD
#define STREAMLLM_EXAMPLES_INSTANTIATE_SHARD(P, R)                                   \
  template class streamllm::Llama<streamllm::TensorShard<streamllm::presets::P, R>>; \
  template class streamllm::parallel::TensorParallelModel<streamllm::presets::P, R>;
#endif
