// A Llama model from a GGUF file: the `llama` architecture's keys and tensor
// names, every shape checked against the template, tensors of any supported
// type viewed in place. Hyper-parameters the file carries (RoPE base, RMS
// epsilon) are used.
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/core/memory.hpp"
#include "streamllm/formats/gguf.hpp"
#include "streamllm/model/weights.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::loaders {

// The model shape a GGUF file declares (max_seq: llama.context_length).
inline ModelShape gguf_shape(const formats::GgufFile& f) {
  const auto arch = f.string("general.architecture");
  if (!arch) f.fail("metadata 'general.architecture' is missing");
  if (*arch != "llama") f.fail("architecture is '" + std::string(*arch) + "'; streamllm runs 'llama' models");
  ModelShape s;
  s.dim = f.required_integer("llama.embedding_length");
  s.hidden_dim = f.required_integer("llama.feed_forward_length");
  s.layers = f.required_integer("llama.block_count");
  s.heads = f.required_integer("llama.attention.head_count");
  s.kv_heads = f.integer("llama.attention.head_count_kv").value_or(s.heads);
  s.max_seq = f.integer("llama.context_length").value_or(0);
  if (const auto* emb = f.tensor("token_embd.weight"); emb && emb->dims.size() == 2)
    s.vocab = emb->dims[1];
  else if (const auto v = f.integer("llama.vocab_size"))
    s.vocab = *v;
  for (auto [name, value] : {std::pair<const char*, std::int64_t>{"embedding_length", s.dim},
                             {"feed_forward_length", s.hidden_dim},
                             {"block_count", s.layers},
                             {"attention.head_count", s.heads},
                             {"attention.head_count_kv", s.kv_heads}})
    if (value <= 0) f.fail(std::string("llama.") + name + " = " + std::to_string(value) + " must be positive");
  return s;
}

// Owns what a GGUF model needs beyond the mapping: norms converted to f32.
struct GgufModelStorage {
  std::shared_ptr<const formats::GgufFile> file;
  std::vector<AlignedVector<float>> converted;
};

namespace detail {
// The tensors of a GGUF file taken by name, each checked for its shape and
// marked used (a tensor left unused is an error: not a Llama 2 model).
class GgufTensors {
 public:
  GgufTensors(const formats::GgufFile& f, GgufModelStorage& storage)
      : f_(f), storage_(storage), used_(f.tensors().size(), false) {}

  TensorView matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
    const formats::GgufTensorInfo& t = get(name, {cols, rows});
    return TensorView{t.type, t.data, rows, cols, row_bytes(t.type, cols)};
  }

  // A norm's weights, as f32 (converted once into the storage if need be).
  const float* vector(const std::string& name, std::int64_t n) {
    const formats::GgufTensorInfo& t = get(name, {n});
    if (t.type == DType::F32) return reinterpret_cast<const float*>(t.data);
    auto& buf = storage_.converted.emplace_back(static_cast<std::size_t>(n));
    quant::dequantize_row(t.type, t.data, n, buf.data());
    return buf.data();
  }

  void require_all_used() const {
    for (std::size_t i = 0; i < used_.size(); ++i)
      if (!used_[i]) f_.fail("tensor '" + f_.tensors()[i].name + "' is not part of a Llama 2 model of this shape");
  }

 private:
  const formats::GgufTensorInfo& get(const std::string& name, const std::vector<std::int64_t>& want) {
    const formats::GgufTensorInfo* t = f_.tensor(name);
    if (!t) f_.fail("tensor '" + name + "' is missing");
    used_[static_cast<std::size_t>(t - f_.tensors().data())] = true;
    if (t->dims != want) f_.fail("tensor " + name + " has shape " + show(t->dims) + ", the template expects " + show(want));
    return *t;
  }
  static std::string show(const std::vector<std::int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }

  const formats::GgufFile& f_;
  GgufModelStorage& storage_;
  std::vector<bool> used_;
};

// RoPE's base and RMSNorm's epsilon, checked as doubles: a value beyond
// float's range must not reach the cast.
inline HyperParams gguf_hparams(const formats::GgufFile& f) {
  const double rope_theta = f.real("llama.rope.freq_base").value_or(10000.0);
  const double rms_eps = f.real("llama.attention.layer_norm_rms_epsilon").value_or(1e-5);
  if (!(rope_theta > 0 && std::isfinite(rope_theta)) || !(rms_eps > 0 && rms_eps < 1))
    f.fail("llama.rope.freq_base (" + (std::ostringstream() << rope_theta).str() +
           ") must be a positive number and "
           "llama.attention.layer_norm_rms_epsilon (" +
           (std::ostringstream() << rms_eps).str() + ") in (0, 1)");
  HyperParams h;
  h.rope_theta = rope_theta;
  h.rms_eps = static_cast<float>(rms_eps);
  // Linear RoPE scaling: positions divided by the factor (ggml's freq_scale).
  const auto scaling = f.string("llama.rope.scaling.type");
  std::optional<double> linear = f.real("llama.rope.scale_linear");  // the older key
  if (scaling && *scaling == "linear")
    linear = f.real("llama.rope.scaling.factor");
  else if (scaling && *scaling != "none")
    f.fail("llama.rope.scaling.type is '" + std::string(*scaling) +
           "'; streamllm reads none and linear (Llama 3.1's scaling comes as the tensor rope_freqs.weight)");
  if (linear) {
    if (!(*linear > 0 && std::isfinite(*linear)))
      f.fail("the linear RoPE scaling factor (" + (std::ostringstream() << *linear).str() + ") must be a positive number");
    h.rope_position_scale = 1.0 / *linear;
  }
  return h;
}
}  // namespace detail

// The weights of a parsed GGUF file (which they keep alive); every shape is
// checked against Config.
template <class Config>
ModelWeights<Config> load_gguf(std::shared_ptr<const formats::GgufFile> file, WeightLayout layout = WeightLayout::ForKernels) {
  const formats::GgufFile& f = *file;
  ModelShape shape = gguf_shape(f);
  // llama.context_length is the trained context; the template's MaxSeq sizes
  // the dense cache. Files made by converters often carry a placeholder here
  // (stories260K-F32.gguf says 128 for a model trained on 512), so it is not
  // held against the template.
  shape.max_seq = Config::MaxSeq;
  check_shape<Config>(shape, f.path());
  HyperParams hparams = detail::gguf_hparams(f);
  if (const auto rope_dims = f.integer("llama.rope.dimension_count"); rope_dims && *rope_dims != Config::HeadDim) {
    if (*rope_dims <= 0 || *rope_dims > Config::HeadDim || *rope_dims % 2 != 0)
      f.fail("llama.rope.dimension_count is " + std::to_string(*rope_dims) + ", not an even count of at most the head's " +
             std::to_string(Config::HeadDim) + " dimensions");
    hparams.rope_dims = static_cast<int>(*rope_dims);
  }

  auto storage = std::make_shared<GgufModelStorage>();
  storage->file = file;
  detail::GgufTensors tensors(f, *storage);
  constexpr std::int64_t D = Config::Dim, H = Config::HiddenDim, KV = Config::KVDim, V = Config::Vocab;
  ModelWeights<Config> w;
  w.source = f.path();
  w.token_embedding = tensors.matrix("token_embd.weight", V, D);
  for (int l = 0; l < Config::Layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& lw = w.layers[static_cast<std::size_t>(l)];
    lw.attn_norm = tensors.vector(p + "attn_norm.weight", D);
    lw.wq = tensors.matrix(p + "attn_q.weight", D, D);
    lw.wk = tensors.matrix(p + "attn_k.weight", KV, D);
    lw.wv = tensors.matrix(p + "attn_v.weight", KV, D);
    lw.wo = tensors.matrix(p + "attn_output.weight", D, D);
    lw.ffn_norm = tensors.vector(p + "ffn_norm.weight", D);
    lw.w_gate = tensors.matrix(p + "ffn_gate.weight", H, D);
    lw.w_down = tensors.matrix(p + "ffn_down.weight", D, H);
    lw.w_up = tensors.matrix(p + "ffn_up.weight", H, D);
  }
  w.final_norm = tensors.vector("output_norm.weight", D);
  w.classifier = f.tensor("output.weight") ? tensors.matrix("output.weight", V, D) : w.token_embedding;
  if (f.tensor("rope_freqs.weight")) {  // one factor per rotated pair of a head
    const std::int64_t pairs = (hparams.rope_dims > 0 ? hparams.rope_dims : Config::HeadDim) / 2;
    const float* factors = tensors.vector("rope_freqs.weight", pairs);
    for (std::int64_t i = 0; i < pairs; ++i) {
      if (!(factors[i] > 0 && std::isfinite(factors[i])))
        f.fail("rope_freqs.weight[" + std::to_string(i) + "] is " + (std::ostringstream() << factors[i]).str() +
               ", not a positive frequency factor");
      hparams.rope_freq_factors.push_back(factors[i]);
    }
  }
  tensors.require_all_used();
  w.hparams = std::move(hparams);
  w.owner = storage;
  return in_layout(std::move(w), layout);
}

template <class Config>
ModelWeights<Config> load_gguf(const std::string& path, formats::LoadMode mode = formats::LoadMode::Mapped,
                               WeightLayout layout = WeightLayout::ForKernels) {
  return load_gguf<Config>(std::make_shared<const formats::GgufFile>(path, mode), layout);
}

}  // namespace streamllm::loaders
