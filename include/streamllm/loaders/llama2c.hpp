// Reader (and writer, for tests and benchmarks) of llama2.c "legacy"
// checkpoints: a 7-int header, then float32 tensors in a fixed order.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/core/checked_size.hpp"
#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/formats/mapped_file.hpp"
#include "streamllm/model/weights.hpp"

namespace streamllm::loaders {

struct Llama2cHeader {
  std::int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};
inline constexpr std::size_t kLlama2cHeaderBytes = sizeof(Llama2cHeader);
static_assert(kLlama2cHeaderBytes == 28);

// Parses and sanity-checks the header; `shared_classifier` is set from the
// sign of vocab_size (negative: a separate classifier follows the weights).
inline ModelShape read_llama2c_shape(const formats::MappedFile& f, bool* shared_classifier = nullptr) {
  if (f.size() < kLlama2cHeaderBytes)
    throw FileError(f.path(), "truncated: " + std::to_string(f.size()) + " bytes, a llama2.c header needs 28");
  Llama2cHeader h;
  std::memcpy(&h, f.data(), sizeof h);
  if (std::memcmp(f.data(), "ak42", 4) == 0)
    throw FileError(f.path(), "is a llama2.c version-1 export ('ak42'); export it with --version 0 (legacy)");
  if (std::memcmp(f.data(), "GGUF", 4) == 0) throw FileError(f.path(), "is a GGUF file, not a llama2.c checkpoint");
  const std::pair<const char*, std::int64_t> fields[] = {
      {"dim", h.dim},         {"hidden_dim", h.hidden_dim}, {"n_layers", h.n_layers},
      {"n_heads", h.n_heads}, {"n_kv_heads", h.n_kv_heads}, {"seq_len", h.seq_len}};
  for (const auto& [name, value] : fields)
    if (value <= 0)
      throw FileError(f.path(), std::string("header field ") + name + " = " + std::to_string(value) + " must be positive");
  if (h.vocab_size == 0) throw FileError(f.path(), "header field vocab_size = 0 must be non-zero");
  if (h.dim % h.n_heads != 0 || h.n_heads % h.n_kv_heads != 0)
    throw FileError(f.path(), "header is inconsistent: dim " + std::to_string(h.dim) + ", heads " + std::to_string(h.n_heads) +
                                  ", kv heads " + std::to_string(h.n_kv_heads));
  if (shared_classifier) *shared_classifier = h.vocab_size > 0;
  return {h.dim,     h.hidden_dim, h.n_layers,
          h.n_heads, h.n_kv_heads, h.vocab_size < 0 ? -std::int64_t(h.vocab_size) : h.vocab_size,
          h.seq_len};
}

// Number of floats after the header for a shape; nothing where the count
// overflows int64 (a crafted header: every field is an int32).
inline std::optional<std::int64_t> llama2c_float_count(const ModelShape& s, bool shared_classifier) {
  const CheckedSize head = s.dim / s.heads, kv = CheckedSize(s.kv_heads) * head, dim = s.dim, layers = s.layers;
  CheckedSize n = CheckedSize(s.vocab) * dim;         // token embedding
  n += layers * dim;                                  // rms_att
  n += layers * (dim * dim * 2 + kv * dim * 2);       // wq wo, wk wv
  n += layers * dim;                                  // rms_ffn
  n += layers * CheckedSize(s.hidden_dim) * dim * 3;  // w1 w2 w3
  n += dim;                                           // rms_final
  n += CheckedSize(s.max_seq) * head;                 // freq_cis real + imag (unused)
  if (!shared_classifier) n += CheckedSize(s.vocab) * dim;
  return n.value();
}

// Bytes of a checkpoint of shape s: its header and floats. Throws FileError
// where that does not fit in 64 bits.
inline std::int64_t llama2c_file_bytes(const ModelShape& s, bool shared_classifier, const std::string& path) {
  const auto floats = llama2c_float_count(s, shared_classifier);
  const auto bytes = floats ? (CheckedSize(*floats) * 4 + static_cast<std::int64_t>(kLlama2cHeaderBytes)).value() : std::nullopt;
  if (!bytes)
    throw FileError(path, "header's shape (dim " + std::to_string(s.dim) + ", hidden_dim " + std::to_string(s.hidden_dim) + ", " +
                              std::to_string(s.layers) + " layers, vocabulary " + std::to_string(s.vocab) +
                              ") is impossible: its weights would need more than 2^63 bytes");
  return *bytes;
}

template <class Config>
ModelWeights<Config> load_llama2c(const std::string& path, formats::LoadMode mode = formats::LoadMode::Mapped,
                                  WeightLayout layout = WeightLayout::ForKernels) {
  auto file = formats::map_file(path, mode);
  bool shared = true;
  const ModelShape shape = read_llama2c_shape(*file, &shared);
  check_shape<Config>(shape, path);
  const std::int64_t need = llama2c_file_bytes(shape, shared, path);
  const auto have = static_cast<std::int64_t>(file->size());
  if (have < need)
    throw FileError(path, "truncated: the shape in its header needs " + std::to_string(need) + " bytes, the file has " +
                              std::to_string(have));
  if (have > need)
    throw FileError(path, "has " + std::to_string(have - need) +
                              " bytes more than a legacy llama2.c checkpoint of its header's shape (" + std::to_string(need) +
                              " bytes)");

  constexpr std::int64_t D = Config::Dim, H = Config::HiddenDim, KV = Config::KVDim;
  const float* p = reinterpret_cast<const float*>(file->data() + kLlama2cHeaderBytes);
  auto take = [&p](std::int64_t count) {
    const float* r = p;
    p += count;
    return r;
  };
  auto matrix = [&take](std::int64_t rows, std::int64_t cols) {
    return TensorView::dense(DType::F32, take(rows * cols), rows, cols);
  };

  ModelWeights<Config> w;
  w.source = path;
  w.owner = file;
  w.token_embedding = matrix(Config::Vocab, D);
  // The file groups each tensor kind over all layers.
  for (auto& l : w.layers) l.attn_norm = take(D);
  for (auto& l : w.layers) l.wq = matrix(D, D);
  for (auto& l : w.layers) l.wk = matrix(KV, D);
  for (auto& l : w.layers) l.wv = matrix(KV, D);
  for (auto& l : w.layers) l.wo = matrix(D, D);
  for (auto& l : w.layers) l.ffn_norm = take(D);
  for (auto& l : w.layers) l.w_gate = matrix(H, D);
  for (auto& l : w.layers) l.w_down = matrix(D, H);
  for (auto& l : w.layers) l.w_up = matrix(H, D);
  w.final_norm = take(D);
  take(Config::MaxSeq * Config::HeadDim);  // freq_cis_real, freq_cis_imag: RoPE is computed instead
  w.classifier = shared ? w.token_embedding : matrix(Config::Vocab, D);
  return in_layout(std::move(w), layout);
}

// The tensors of a checkpoint of any shape, with GGUF's names and dimension
// order (ne0, the row length, first): what the converter writes.
struct Llama2cTensor {
  std::string name;
  std::vector<std::int64_t> dims;
  const float* data;
};

inline std::vector<Llama2cTensor> llama2c_tensors(const formats::MappedFile& f) {
  bool shared = true;
  const ModelShape s = read_llama2c_shape(f, &shared);
  const std::int64_t need = llama2c_file_bytes(s, shared, f.path());
  if (static_cast<std::int64_t>(f.size()) != need)
    throw FileError(f.path(),
                    "has " + std::to_string(f.size()) + " bytes, the shape in its header needs " + std::to_string(need));
  const std::int64_t D = s.dim, H = s.hidden_dim, KV = s.kv_heads * (s.dim / s.heads);
  const float* p = reinterpret_cast<const float*>(f.data() + kLlama2cHeaderBytes);
  std::vector<Llama2cTensor> out;
  auto take = [&](const std::string& name, std::vector<std::int64_t> dims) {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    out.push_back({name, std::move(dims), p});
    p += n;
  };
  auto per_layer = [&](const std::string& suffix, std::vector<std::int64_t> dims) {
    for (std::int64_t l = 0; l < s.layers; ++l) take("blk." + std::to_string(l) + "." + suffix, dims);
  };
  take("token_embd.weight", {D, s.vocab});
  per_layer("attn_norm.weight", {D});
  per_layer("attn_q.weight", {D, D});
  per_layer("attn_k.weight", {D, KV});
  per_layer("attn_v.weight", {D, KV});
  per_layer("attn_output.weight", {D, D});
  per_layer("ffn_norm.weight", {D});
  per_layer("ffn_gate.weight", {D, H});
  per_layer("ffn_down.weight", {H, D});
  per_layer("ffn_up.weight", {D, H});
  take("output_norm.weight", {D});
  p += s.max_seq * (s.dim / s.heads);  // freq_cis tables
  if (!shared) take("output.weight", {D, s.vocab});
  return out;
}

// Writes a legacy checkpoint: `floats` must hold exactly llama2c_float_count
// values in file order. Used by tests (corrupt files) and benchmarks (random
// weights of a given shape).
inline void write_llama2c(const std::string& path, const ModelShape& s, bool shared_classifier, std::span<const float> floats) {
  const auto need = llama2c_float_count(s, shared_classifier);
  if (!need || static_cast<std::int64_t>(floats.size()) != *need)
    throw Error("write_llama2c: " + std::to_string(floats.size()) + " floats given, the shape needs " +
                (need ? std::to_string(*need) : std::string("more than 2^63")));
  std::ofstream out(path, std::ios::binary);
  if (!out) throw FileError(path, "cannot create");
  const Llama2cHeader h{static_cast<std::int32_t>(s.dim),      static_cast<std::int32_t>(s.hidden_dim),
                        static_cast<std::int32_t>(s.layers),   static_cast<std::int32_t>(s.heads),
                        static_cast<std::int32_t>(s.kv_heads), static_cast<std::int32_t>(shared_classifier ? s.vocab : -s.vocab),
                        static_cast<std::int32_t>(s.max_seq)};
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out.write(reinterpret_cast<const char*>(floats.data()), static_cast<std::streamsize>(floats.size() * sizeof(float)));
  if (!out) throw FileError(path, "write failed");
}

}  // namespace streamllm::loaders
