// Run-time dispatch to the compile-time presets, for front ends that accept
// any model file (the examples): f is called with a default-constructed
// preset config type.
#pragma once

#include <string>

#include "streamllm/config.hpp"
#include "streamllm/error.hpp"

namespace streamllm {

inline std::string supported_presets() {
  std::string s;
#define STREAMLLM_ADD_PRESET(P) s += std::string("\n  " #P ": ") + presets::P::shape().to_string();
  STREAMLLM_FOR_EACH_PRESET(STREAMLLM_ADD_PRESET)
#undef STREAMLLM_ADD_PRESET
  return s;
}

// With match_max_seq false (GGUF files, whose context length is not
// enforced), the sequence length is left out of the comparison.
template <class F>
decltype(auto) with_preset(const ModelShape& shape, F&& f, bool match_max_seq = true) {
  using namespace presets;
  auto is = [&](const ModelShape& p) {
    ModelShape s = shape;
    if (!match_max_seq) s.max_seq = p.max_seq;
    return s == p;
  };
#define STREAMLLM_TRY_PRESET(P) \
  if (is(P::shape())) return f(P{});
  STREAMLLM_FOR_EACH_PRESET(STREAMLLM_TRY_PRESET)
#undef STREAMLLM_TRY_PRESET
  throw Error("no compiled-in preset has the shape " + shape.to_string() + "; supported shapes:" + supported_presets() +
              "\nOther shapes work through the library: name them as LlamaConfig<...> in your program.");
}

}  // namespace streamllm
