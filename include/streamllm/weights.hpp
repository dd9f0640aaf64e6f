// The weights of a Llama 2 model of a compile-time shape: views into the
// mapped file (one model, any number of caches and sequences).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "streamllm/config.hpp"
#include "streamllm/error.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [Dim]
  TensorView wq;                     // [Dim x Dim]
  TensorView wk;                     // [KVDim x Dim]
  TensorView wv;                     // [KVDim x Dim]
  TensorView wo;                     // [Dim x Dim]
  const float* ffn_norm = nullptr;   // [Dim]
  TensorView w_gate;                 // w1 [HiddenDim x Dim]
  TensorView w_down;                 // w2 [Dim x HiddenDim]
  TensorView w_up;                   // w3 [HiddenDim x Dim]
};

template <class Config>
struct ModelWeights {
  TensorView token_embedding;  // [Vocab x Dim]
  std::array<LayerWeights, Config::Layers> layers{};
  const float* final_norm = nullptr;  // [Dim]
  TensorView classifier;              // [Vocab x Dim], often the embedding itself
  HyperParams hparams;
  std::string source;                 // the file the views point into
  std::shared_ptr<const void> owner;  // keeps the mapping (and any converted buffers) alive
};

// Throws when a file's shape is not the template's. `what` names the file.
template <class Config>
void check_shape(const ModelShape& file, const std::string& path) {
  const ModelShape want = Config::shape();
  if (file == want) return;
  std::string diff;
  auto field = [&](const char* name, std::int64_t got, std::int64_t expected) {
    if (got != expected)
      diff += std::string(diff.empty() ? "" : ", ") + name + " is " + std::to_string(got) +
              " in the file but " + std::to_string(expected) + " in the template";
  };
  field("dim", file.dim, want.dim);
  field("hidden_dim", file.hidden_dim, want.hidden_dim);
  field("layers", file.layers, want.layers);
  field("heads", file.heads, want.heads);
  field("kv_heads", file.kv_heads, want.kv_heads);
  field("vocab", file.vocab, want.vocab);
  field("max_seq", file.max_seq, want.max_seq);
  throw FileError(path, "model shape does not match the template parameters: " + diff);
}

}  // namespace streamllm
