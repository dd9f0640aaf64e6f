// The weights of a Llama 2 model of a compile-time shape: views into the
// mapped file (one model, any number of caches and sequences).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/core/hash.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/repack.hpp"

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
  TensorView token_embedding;  // [Vocab x Dim], or a shard's rows of it
  TokenId first_token = 0;     // the token of token_embedding's row 0 (a shard's slice of the vocabulary)
  std::array<LayerWeights, Config::Layers> layers{};
  const float* final_norm = nullptr;  // [Dim]
  TensorView classifier;              // [Vocab x Dim], often the embedding itself
  HyperParams hparams;
  std::string source;                 // the file the views point into
  std::shared_ptr<const void> owner;  // keeps the mapping (and any converted buffers) alive
  std::uint64_t fingerprint = 0;      // weights_fingerprint of the file's tensors (0: not yet computed)
};

// Throws when a file's shape is not the template's. `what` names the file.
template <class Config>
void check_shape(const ModelShape& file, const std::string& path) {
  const ModelShape want = Config::shape();
  if (file == want) return;
  std::string diff;
  auto field = [&](const char* name, std::int64_t got, std::int64_t expected) {
    if (got != expected)
      diff += std::string(diff.empty() ? "" : ", ") + name + " is " + std::to_string(got) + " in the file but " +
              std::to_string(expected) + " in the template";
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

// A fingerprint of a model's weights, to tell whether state computed by one
// model (a saved KV cache) belongs to another: each tensor's type and shape,
// and 16 samples of 64 bytes spread over its data (all of it when smaller),
// so it reads a few pages per tensor, not the whole file.
inline void hash_tensor(Hash64& h, const TensorView& t) {
  h.value(t.type).value(t.rows).value(t.cols);
  const auto bytes = static_cast<std::size_t>(t.bytes());
  constexpr std::size_t kSamples = 16, kSample = 64;
  if (bytes <= kSamples * kSample) {
    h.update(t.data, bytes);
    return;
  }
  for (std::size_t i = 0; i < kSamples; ++i) h.update(t.data + (bytes - kSample) * i / (kSamples - 1), kSample);
}

template <class Config>
std::uint64_t weights_fingerprint(const ModelWeights<Config>& w) {
  Hash64 h;
  const ModelShape s = Config::shape();
  h.value(s).value(w.hparams.rope_theta).value(w.hparams.rms_eps);
  // RoPE's scaling only where a file has one, so that older fingerprints hold.
  if (!w.hparams.rope_freq_factors.empty())
    h.update(w.hparams.rope_freq_factors.data(), w.hparams.rope_freq_factors.size() * sizeof(double));
  if (w.hparams.rope_position_scale != 1.0) h.value(w.hparams.rope_position_scale);
  if (w.hparams.rope_dims != 0) h.value(w.hparams.rope_dims);
  auto norm = [&](const float* p) { h.update(p, Config::Dim * sizeof(float)); };
  hash_tensor(h, w.token_embedding);
  for (const LayerWeights& l : w.layers) {
    norm(l.attn_norm);
    norm(l.ffn_norm);
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) hash_tensor(h, *t);
  }
  norm(w.final_norm);
  hash_tensor(h, w.classifier);
  return h.digest();
}

// Computes the fingerprint once, from the tensors as the file has them (a
// Llama repacks some at load; copies of its weights keep this value).
template <class Config>
ModelWeights<Config> with_fingerprint(ModelWeights<Config> w) {
  if (w.fingerprint == 0) w.fingerprint = weights_fingerprint(w) | 1;
  return w;
}

// The weights ready for the kernels of `isa`: their fingerprint taken from
// the file's tensors, then the matrices (the layers' and the classifier; the
// embedding table stays, rows are looked up there) repacked where the
// kernel table says so. The loaders call this; weights built by hand run
// as they are, or may be passed through it too.
template <class Config>
ModelWeights<Config> prepare_weights(ModelWeights<Config> w, kernels::Isa isa = kernels::active_isa()) {
  w = with_fingerprint(std::move(w));
  std::vector<TensorView*> matrices;
  for (LayerWeights& l : w.layers)
    for (TensorView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) matrices.push_back(m);
  matrices.push_back(&w.classifier);
  if (auto repacked = kernels::repack_matrices(matrices, w.owner, w.token_embedding.data, isa)) w.owner = std::move(repacked);
  return w;
}

// What a loader returns: the weights ready for this CPU's kernels (some
// repacked: prepare_weights), or as the file has them, to be cut into the
// shards of a model split across processes first (loaders/shard_weights.hpp).
enum class WeightLayout { ForKernels, AsInFile };

template <class Config>
ModelWeights<Config> in_layout(ModelWeights<Config> w, WeightLayout layout) {
  return layout == WeightLayout::ForKernels ? prepare_weights(std::move(w)) : std::move(w);
}

}  // namespace streamllm
