// The known shapes (presets::TinyLlama1B, ...), and the run-time dispatch to
// them for front ends that accept any model file (the examples): f is called
// with a default-constructed preset config type.
#pragma once

#include <string>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"

namespace streamllm {

namespace presets {
// Karpathy's tinyllamas (llama2.c): the TinyStories models.
using Stories260K = LlamaConfig<64, 172, 5, 8, 4, 512, 512>;
using Stories15M = LlamaConfig<288, 768, 6, 6, 6, 32000, 256>;
using Stories42M = LlamaConfig<512, 1376, 8, 8, 8, 32000, 1024>;
using Stories110M = LlamaConfig<768, 2048, 12, 12, 12, 32000, 1024>;
// TinyLlama-1.1B (grouped-query attention, 4 kv heads).
using TinyLlama1B = LlamaConfig<2048, 5632, 22, 32, 4, 32000, 2048>;
// Meta's Llama 2.
using Llama2_7B = LlamaConfig<4096, 11008, 32, 32, 32, 32000, 4096>;
using Llama2_13B = LlamaConfig<5120, 13824, 40, 40, 40, 32000, 4096>;
// Meta's Llama 3.x: byte-level BPE of 128256 tokens, 8 KV heads. MaxSeq
// bounds a dense cache's default size only (a GGUF file's context is not
// matched): 8192 of the 131072 positions they were trained to.
using Llama3_2_1B = LlamaConfig<2048, 8192, 16, 32, 8, 128256, 8192>;
using Llama3_2_3B = LlamaConfig<3072, 8192, 28, 24, 8, 128256, 8192>;
using Llama3_1_8B = LlamaConfig<4096, 14336, 32, 32, 8, 128256, 8192>;
// Mistral-7B: v0.1 and v0.2 have 32000 tokens, v0.3 32768.
using Mistral7B = LlamaConfig<4096, 14336, 32, 32, 8, 32000, 8192>;
using Mistral7B_v03 = LlamaConfig<4096, 14336, 32, 32, 8, 32768, 8192>;
// Hugging Face's SmolLM2: byte-level BPE of 49152 tokens, tied embeddings.
using SmolLM2_135M = LlamaConfig<576, 1536, 30, 9, 3, 49152, 8192>;
using SmolLM2_360M = LlamaConfig<960, 2560, 32, 15, 5, 49152, 8192>;
using SmolLM2_1_7B = LlamaConfig<2048, 8192, 24, 32, 32, 49152, 8192>;
}  // namespace presets

// Every preset above, for code that must name each one (X is called with the
// preset's name): the run-time dispatch below, and a program's
// explicit instantiations of Llama<preset> (examples/common/preset_models.hpp).
#define STREAMLLM_FOR_EACH_PRESET(X)                                                                       \
  X(Stories260K) X(Stories15M) X(Stories42M) X(Stories110M) X(TinyLlama1B) X(Llama2_7B) X(Llama2_13B) \
  X(Llama3_2_1B) X(Llama3_2_3B) X(Llama3_1_8B) X(Mistral7B) X(Mistral7B_v03) X(SmolLM2_135M) X(SmolLM2_360M) X(SmolLM2_1_7B)

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
