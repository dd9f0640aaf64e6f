// The compile-time shape of a Llama model (LlamaConfig), the run-time one a
// file describes (ModelShape), and the hyper-parameters that size no buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace streamllm {

using TokenId = std::int32_t;

// The shape of a model as a file describes it, known only at run time.
struct ModelShape {
  std::int64_t dim = 0;
  std::int64_t hidden_dim = 0;
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t vocab = 0;
  std::int64_t max_seq = 0;

  friend bool operator==(const ModelShape&, const ModelShape&) = default;

  std::string to_string() const {
    return "dim=" + std::to_string(dim) + " hidden_dim=" + std::to_string(hidden_dim) + " layers=" + std::to_string(layers) +
           " heads=" + std::to_string(heads) + " kv_heads=" + std::to_string(kv_heads) + " vocab=" + std::to_string(vocab) +
           " max_seq=" + std::to_string(max_seq);
  }
};

// Hyper-parameters that do not change any buffer size, so they stay run-time
// values carried by the file (GGUF stores both; llama2.c files use these defaults).
struct HyperParams {
  double rope_theta = 10000.0;
  float rms_eps = 1e-5f;
  // RoPE as the file scales it: per-pair frequency factors (rope_freqs.weight),
  // linear position scaling, rotary dimensions (0: the whole head).
  std::vector<double> rope_freq_factors;
  double rope_position_scale = 1.0;
  int rope_dims = 0;
};

// LlamaConfig<Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, MaxSeq>: every
// buffer size of the model follows from these, so they are constants in the type.
template <int Dim_, int HiddenDim_, int Layers_, int Heads_, int KVHeads_, int Vocab_, int MaxSeq_>
struct LlamaConfig {
  static constexpr int Dim = Dim_;
  static constexpr int HiddenDim = HiddenDim_;
  static constexpr int Layers = Layers_;
  static constexpr int Heads = Heads_;
  static constexpr int KVHeads = KVHeads_;
  static constexpr int Vocab = Vocab_;
  static constexpr int MaxSeq = MaxSeq_;

  static_assert(Dim > 0 && HiddenDim > 0 && Layers > 0 && Heads > 0 && KVHeads > 0 && Vocab > 0 && MaxSeq > 0,
                "every dimension must be positive");
  static_assert(Dim % Heads == 0, "Dim must be divisible by Heads");
  static_assert(Heads % KVHeads == 0, "Heads must be divisible by KVHeads (grouped-query attention)");

  static constexpr int HeadDim = Dim / Heads;
  static constexpr int QDim = Heads * HeadDim;  // Dim; a tensor-parallel shard's is its heads' share (shard/)
  static constexpr int KVDim = KVHeads * HeadDim;
  static constexpr int GroupSize = Heads / KVHeads;  // query heads per kv head

  static_assert(HeadDim % 2 == 0, "RoPE rotates pairs, so the head dimension must be even");

  static constexpr ModelShape shape() { return {Dim, HiddenDim, Layers, Heads, KVHeads, Vocab, MaxSeq}; }
};

}  // namespace streamllm
