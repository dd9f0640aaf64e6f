// The model of every preset the programs run, and its loader, are compiled
// once for all the example programs, in units CMake makes from the preset
// list (examples/CMakeLists.txt: STREAMLLM_EXAMPLE_PRESETS, every preset
// unless a build names fewer). Each program dispatches
// over those presets (with_example_preset), and without these declarations each would
// compile every preset's forward pass, with every kernel under it, and its
// loader again. A program of your own can do the same for the shapes it uses.
#pragma once

#include <string>
#include <type_traits>

#include "example_shapes.hpp"  // made by examples/CMakeLists.txt: STREAMLLM_EXAMPLES_FOR_EACH_PRESET, _SHARD
#include "streamllm/loaders/model_file.hpp"
#include "streamllm/model/llama.hpp"
#include "streamllm/model/presets.hpp"

#define STREAMLLM_EXAMPLES_EXTERN_MODEL(P)                       \
  extern template class streamllm::Llama<streamllm::presets::P>; \
  extern template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);
STREAMLLM_EXAMPLES_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_EXTERN_MODEL)
#undef STREAMLLM_EXAMPLES_EXTERN_MODEL

// The explicit instantiation the extern declarations above promise.
#define STREAMLLM_EXAMPLES_INSTANTIATE(P)                 \
  template class streamllm::Llama<streamllm::presets::P>; \
  template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);

// Tensor parallel (common/model_job.hpp): in an MPI job the examples split
// a model over the process counts STREAMLLM_EXAMPLE_SPLITS lists (each
// divides the preset's KV heads; the shapes worth splitting, and stories260K
// for the tests: each split costs every front end a compile of its code).

namespace examples {

// Whether a file's shape is a preset's; with match_max_seq false (GGUF
// files, whose context length is not enforced) the sequence length aside.
inline bool same_shape(streamllm::ModelShape file, const streamllm::ModelShape& preset, bool match_max_seq) {
  if (!match_max_seq) file.max_seq = preset.max_seq;
  return file == preset;
}

// f(config) for the compiled preset of `shape` (with_preset over the
// presets this build's programs compile).
template <class F>
decltype(auto) with_example_preset(const streamllm::ModelShape& shape, F&& f, bool match_max_seq) {
  using namespace streamllm::presets;
  auto is = [&](const streamllm::ModelShape& p) { return same_shape(shape, p, match_max_seq); };
  std::string shapes;
#define STREAMLLM_EXAMPLES_TRY_PRESET(P)                    \
  shapes += "\n  " #P ": " + P::shape().to_string(); \
  if (is(P::shape())) return f(P{});
  STREAMLLM_EXAMPLES_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_TRY_PRESET)
#undef STREAMLLM_EXAMPLES_TRY_PRESET
  throw streamllm::Error("no compiled-in preset has the shape " + shape.to_string() + "; supported shapes:" + shapes +
                         "\nOther shapes work through the library: name them as LlamaConfig<...> in your program.");
}

// f(config, ranks) for the split of `shape` over `ranks` processes, a
// std::integral_constant; throws, listing the splits there are, for none.
template <class F>
decltype(auto) with_sharded_preset(const streamllm::ModelShape& shape, int ranks, F&& f, bool match_max_seq) {
  using namespace streamllm::presets;
  auto is = [&](const streamllm::ModelShape& p) { return same_shape(shape, p, match_max_seq); };
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
