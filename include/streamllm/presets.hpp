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
  auto add = [&s](const char* name, const ModelShape& m) { s += std::string("\n  ") + name + ": " + m.to_string(); };
  add("Stories260K", presets::Stories260K::shape());
  add("Stories15M", presets::Stories15M::shape());
  add("Stories42M", presets::Stories42M::shape());
  add("Stories110M", presets::Stories110M::shape());
  add("TinyLlama1B", presets::TinyLlama1B::shape());
  add("Llama2_7B", presets::Llama2_7B::shape());
  add("Llama2_13B", presets::Llama2_13B::shape());
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
  if (is(Stories260K::shape())) return f(Stories260K{});
  if (is(Stories15M::shape())) return f(Stories15M{});
  if (is(Stories42M::shape())) return f(Stories42M{});
  if (is(Stories110M::shape())) return f(Stories110M{});
  if (is(TinyLlama1B::shape())) return f(TinyLlama1B{});
  if (is(Llama2_7B::shape())) return f(Llama2_7B{});
  if (is(Llama2_13B::shape())) return f(Llama2_13B{});
  throw Error("no compiled-in preset has the shape " + shape.to_string() +
              "; supported shapes:" + supported_presets() +
              "\nOther shapes work through the library: name them as LlamaConfig<...> in your program.");
}

}  // namespace streamllm
