// The model of every preset, and its loader, are compiled once for all the
// example programs, in preset_models.cpp. Each program dispatches
// over every preset (with_preset), and without these declarations each would
// compile seven forward passes, with every kernel under them, and seven
// loaders again. A program of your own can do the same for the shapes it uses.
#pragma once

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
// the models of these presets over 2 processes; the shards' models and
// their loading are compiled once too, in shard_models.cpp. Only the shapes
// worth splitting, and stories260K for the tests: each costs the programs a
// compile of every front end again.
#define STREAMLLM_EXAMPLES_FOR_EACH_SHARDED(X) X(Stories260K) X(TinyLlama1B) X(Llama2_7B) X(Llama2_13B)

namespace examples {
inline constexpr int kExampleRanks = 2;

template <class F>
decltype(auto) with_sharded_preset(const streamllm::ModelShape& shape, F&& f, bool match_max_seq) {
  using namespace streamllm::presets;
  auto is = [&](const streamllm::ModelShape& p) {
    streamllm::ModelShape s = shape;
    if (!match_max_seq) s.max_seq = p.max_seq;
    return s == p;
  };
  std::string names;
#define STREAMLLM_EXAMPLES_TRY_SHARDED(P) \
  names += " " #P;                        \
  if (is(P::shape())) return f(P{});
  STREAMLLM_EXAMPLES_FOR_EACH_SHARDED(STREAMLLM_EXAMPLES_TRY_SHARDED)
#undef STREAMLLM_EXAMPLES_TRY_SHARDED
  throw streamllm::Error("the example programs split only these presets across processes:" + names + "; the shape " +
                         shape.to_string() + " is not one of them");
}
}  // namespace examples

#if defined(STREAMLLM_EXAMPLES_MPI)
#include "streamllm/parallel/tensor_parallel.hpp"
#define STREAMLLM_EXAMPLES_EXTERN_SHARD(P)                                                  \
  extern template class streamllm::Llama<streamllm::TensorShard<streamllm::presets::P, 2>>; \
  extern template class streamllm::parallel::TensorParallelModel<streamllm::presets::P, 2>;
STREAMLLM_EXAMPLES_FOR_EACH_SHARDED(STREAMLLM_EXAMPLES_EXTERN_SHARD)
#undef STREAMLLM_EXAMPLES_EXTERN_SHARD
#define STREAMLLM_EXAMPLES_INSTANTIATE_SHARD(P)                                      \
  template class streamllm::Llama<streamllm::TensorShard<streamllm::presets::P, 2>>; \
  template class streamllm::parallel::TensorParallelModel<streamllm::presets::P, 2>;
#endif
