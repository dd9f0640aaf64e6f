// llama2.c checkpoint (+ its tokenizer: a SentencePiece .model or a Hugging
// Face tokenizer.json) to GGUF, quantised to any supported type; or a
// tokenizer alone to a vocabulary-only GGUF. The files load in llama.cpp and
// round-trip through our reader. Needs nlohmann-json (tokenizer.json).
#pragma once

#include <string>
#include <vector>

#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/formats/hf_tokenizer.hpp"
#include "streamllm/formats/sentencepiece_model.hpp"
#include "streamllm/loaders/llama2c.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::loaders {

// What a converted file holds: one type for all matrices, or a mix as
// llama.cpp's llama-quantize makes it for a Llama model (tensor_type).
enum class ConvertRecipe {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
  Q4_K_M,
  Q5_K_M,
  Q2_K,
  Q3_K_S,
  Q3_K_M,
  Q3_K_L,
  IQ4_NL,
  IQ4_XS
};

struct RecipeInfo {
  const char* name;
  ConvertRecipe recipe;
  DType type;               // the matrices' type (of most of them, in a mix)
  std::uint32_t file_type;  // llama.cpp's llama_ftype
};
inline constexpr RecipeInfo kRecipes[] = {
    {"f32", ConvertRecipe::F32, DType::F32, 0},          {"f16", ConvertRecipe::F16, DType::F16, 1},
    {"bf16", ConvertRecipe::BF16, DType::BF16, 32},      {"q8_0", ConvertRecipe::Q8_0, DType::Q8_0, 7},
    {"q4_0", ConvertRecipe::Q4_0, DType::Q4_0, 2},       {"q4_1", ConvertRecipe::Q4_1, DType::Q4_1, 3},
    {"q5_0", ConvertRecipe::Q5_0, DType::Q5_0, 8},       {"q5_1", ConvertRecipe::Q5_1, DType::Q5_1, 9},
    {"q4_k", ConvertRecipe::Q4_K, DType::Q4_K, 14},      {"q5_k", ConvertRecipe::Q5_K, DType::Q5_K, 16},
    {"q6_k", ConvertRecipe::Q6_K, DType::Q6_K, 18},      {"q4_k_m", ConvertRecipe::Q4_K_M, DType::Q4_K, 15},
    {"q5_k_m", ConvertRecipe::Q5_K_M, DType::Q5_K, 17},  {"q2_k", ConvertRecipe::Q2_K, DType::Q2_K, 10},
    {"q3_k_s", ConvertRecipe::Q3_K_S, DType::Q3_K, 11},  {"q3_k_m", ConvertRecipe::Q3_K_M, DType::Q3_K, 12},
    {"q3_k_l", ConvertRecipe::Q3_K_L, DType::Q3_K, 13},  {"iq4_nl", ConvertRecipe::IQ4_NL, DType::IQ4_NL, 25},
    {"iq4_xs", ConvertRecipe::IQ4_XS, DType::IQ4_XS, 30}};

inline const RecipeInfo& recipe_info(ConvertRecipe r) {
  for (const auto& info : kRecipes)
    if (info.recipe == r) return info;
  throw InputError("unknown conversion recipe " + std::to_string(static_cast<int>(r)));
}

inline std::string recipe_names() {
  std::string names;
  for (const auto& info : kRecipes) names += std::string(names.empty() ? "" : ", ") + info.name;
  return names;
}

inline ConvertRecipe parse_recipe(const std::string& s) {
  for (const auto& info : kRecipes)
    if (s == info.name) return info.recipe;
  throw InputError("unknown type '" + s + "' (" + recipe_names() + ")");
}

inline std::uint32_t file_type(ConvertRecipe r) { return recipe_info(r).file_type; }

// Where a matrix sits in the model, for the mixes' rules.
struct TensorPlace {
  const std::string& name;
  std::int64_t layer;  // -1 outside the layers
  std::int64_t layers;
  std::int64_t gqa;  // query heads per KV head
  bool tied_output;  // token_embd is the classifier too
};

// The type llama-quantize gives a Llama matrix in a mix: more bits for the
// classifier, and for attn_v, ffn_down and attn_output where quantisation
// hurts most (llama.cpp's llama_tensor_get_type, for this architecture).
inline DType mixed_type(ConvertRecipe r, const TensorPlace& at) {
  const DType base = recipe_info(r).type;
  const bool output = at.name == "output.weight" || (at.tied_output && at.name == "token_embd.weight");
  const auto has = [&](const char* kind) { return at.name.find(kind) != std::string::npos; };
  const bool attn_v = has("attn_v.weight"), ffn_down = has("ffn_down.weight"), attn_out = has("attn_output.weight");
  switch (r) {
    case ConvertRecipe::Q4_K_M:
    case ConvertRecipe::Q5_K_M: {
      // First and last eighth of the layers, and every third between.
      const std::int64_t l = at.layer, n = at.layers;
      const bool more = l >= 0 && (l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2);
      return output || ((attn_v || ffn_down) && more) ? DType::Q6_K : base;
    }
    case ConvertRecipe::Q2_K:
      if (output) return DType::Q6_K;
      if (attn_v) return at.gqa >= 4 ? DType::Q4_K : DType::Q3_K;
      return ffn_down || attn_out ? DType::Q3_K : base;
    case ConvertRecipe::Q3_K_S: return output ? DType::Q6_K : base;
    case ConvertRecipe::Q3_K_M:
      if (output) return DType::Q6_K;
      if (attn_v) return at.layer < 2 ? DType::Q5_K : DType::Q4_K;
      if (ffn_down) return at.layer < at.layers / 16 ? DType::Q5_K : DType::Q4_K;
      return attn_out ? DType::Q4_K : base;
    case ConvertRecipe::Q3_K_L:
      if (output) return DType::Q6_K;
      return attn_v || ffn_down || attn_out ? DType::Q5_K : base;
    case ConvertRecipe::IQ4_NL:
    case ConvertRecipe::IQ4_XS:
      if (output) return DType::Q6_K;
      return attn_v && at.gqa >= 4 ? DType::Q5_K : base;
    default: return base;
  }
}

// The type of one matrix of row length row_len. Rows that do not fill whole
// blocks fall back as llama-quantize does: the 2- and 3-bit K-quants and
// IQ4_XS to IQ4_NL, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0 (blocks of 32
// with about their bits), and anything to F16 if those do not fit either.
inline DType tensor_type(ConvertRecipe r, const TensorPlace& at, std::int64_t row_len) {
  DType t = mixed_type(r, at);
  if (row_len % traits(t).block_elems != 0) switch (t) {
      case DType::Q2_K:
      case DType::Q3_K:
      case DType::IQ4_XS: t = DType::IQ4_NL; break;
      case DType::Q4_K: t = DType::Q5_0; break;
      case DType::Q5_K: t = DType::Q5_1; break;
      case DType::Q6_K: t = DType::Q8_0; break;
      default: break;
    }
  if (row_len % traits(t).block_elems != 0) t = DType::F16;
  return t;
}

// A SentencePiece model's keys, as llama.cpp reads them.
inline void write_tokenizer(formats::GgufWriter& w, const formats::SentencePieceModel& sp) {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  for (const auto& p : sp.pieces) {
    pieces.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  w.set("tokenizer.ggml.model", std::string("llama"));
  w.set("tokenizer.ggml.tokens", pieces);
  w.set("tokenizer.ggml.scores", scores);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(sp.bos_id));
  w.set("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(sp.eos_id));
  w.set("tokenizer.ggml.unknown_token_id", static_cast<std::uint32_t>(sp.unk_id));
  w.set("tokenizer.ggml.add_bos_token", true);
  w.set("tokenizer.ggml.add_eos_token", false);
  w.set("tokenizer.ggml.add_space_prefix", sp.add_dummy_prefix);
  w.set("tokenizer.ggml.remove_extra_whitespaces", sp.remove_extra_whitespaces);
}

// A tokenizer file's keys, told by its name: tokenizer.json (byte-level
// BPE) or a SentencePiece .model. Returns the vocabulary's size.
inline std::size_t write_tokenizer_file(formats::GgufWriter& w, const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    const auto hf = formats::HfTokenizer::read(path);
    hf.write(w);
    return hf.tokens.size();
  }
  const auto sp = formats::SentencePieceModel::read(path);
  write_tokenizer(w, sp);
  return sp.pieces.size();
}

// A vocabulary-only GGUF (as llama.cpp's ggml-vocab-*.gguf): the tokenizer's
// keys and no tensors.
inline void convert_tokenizer_to_gguf(const std::string& tokenizer_path, const std::string& out_path,
                                      const std::string& name = "vocab") {
  formats::GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("general.name", name);
  write_tokenizer_file(w, tokenizer_path);
  w.write(out_path);
}

// The llama architecture's keys, as llama.cpp reads them.
inline void write_llama_metadata(formats::GgufWriter& w, const ModelShape& s, ConvertRecipe recipe, const std::string& name) {
  w.set("general.architecture", std::string("llama"));
  w.set("general.name", name);
  w.set("general.file_type", file_type(recipe));
  w.set("llama.context_length", static_cast<std::uint32_t>(s.max_seq));
  w.set("llama.embedding_length", static_cast<std::uint32_t>(s.dim));
  w.set("llama.feed_forward_length", static_cast<std::uint32_t>(s.hidden_dim));
  w.set("llama.block_count", static_cast<std::uint32_t>(s.layers));
  w.set("llama.attention.head_count", static_cast<std::uint32_t>(s.heads));
  w.set("llama.attention.head_count_kv", static_cast<std::uint32_t>(s.kv_heads));
  w.set("llama.rope.dimension_count", static_cast<std::uint32_t>(s.dim / s.heads));
  w.set("llama.rope.freq_base", 10000.0f);
  w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set("llama.vocab_size", static_cast<std::uint32_t>(s.vocab));
}

// One tensor of f32 values, in the recipe's type for it.
inline void add_converted_tensor(formats::GgufWriter& w, ConvertRecipe recipe, const std::string& name,
                                 const std::vector<std::int64_t>& dims, const float* data, std::int64_t layers, std::int64_t gqa,
                                 bool tied_output) {
  std::int64_t layer = -1;
  if (name.rfind("blk.", 0) == 0) layer = std::stoll(name.substr(4));
  const DType type = dims.size() == 1 ? DType::F32 : tensor_type(recipe, {name, layer, layers, gqa, tied_output}, dims[0]);
  std::int64_t rows = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
  std::vector<std::byte> bytes(static_cast<std::size_t>(row_bytes(type, dims[0]) * rows));
  for (std::int64_t r = 0; r < rows; ++r) try {
      quant::quantize_row(type, data + r * dims[0], dims[0], bytes.data() + r * row_bytes(type, dims[0]));
    } catch (const InputError& e) {
      throw InputError("tensor " + name + ", row " + std::to_string(r) + ": " + e.what());
    }
  w.add_tensor(name, type, dims, std::move(bytes));
}

inline void convert_llama2c_to_gguf(const std::string& model_path, const std::string& tokenizer_path, const std::string& out_path,
                                    ConvertRecipe recipe, const std::string& name = "llama") {
  const formats::MappedFile f(model_path);
  bool shared = true;
  const ModelShape s = read_llama2c_shape(f, &shared);
  formats::GgufWriter w;
  write_llama_metadata(w, s, recipe, name);
  const std::size_t vocab = write_tokenizer_file(w, tokenizer_path);
  if (static_cast<std::int64_t>(vocab) != s.vocab)
    throw InputError("the tokenizer " + tokenizer_path + " has " + std::to_string(vocab) + " tokens, the model " + model_path +
                     " a vocabulary of " + std::to_string(s.vocab));
  for (const auto& t : llama2c_tensors(f)) try {
      add_converted_tensor(w, recipe, t.name, t.dims, t.data, s.layers, s.heads / s.kv_heads, shared);
    } catch (const InputError& e) {  // a value the type cannot hold: the input file's fault
      throw FileError(model_path, e.what());
    }
  w.write(out_path);
}

}  // namespace streamllm::loaders
