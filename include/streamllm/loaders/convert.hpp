// llama2.c checkpoint (+ SentencePiece model) to GGUF, quantised to any
// supported type. The files load in llama.cpp and round-trip through our reader.
#pragma once

#include <string>
#include <vector>

#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/loaders/llama2c.hpp"
#include "streamllm/formats/sentencepiece_model.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::io {

// What a converted file holds: one type for all matrices, or a K-quant mix
// as llama.cpp makes it (Q4_K_M, Q5_K_M: Q6_K for the output and for attn_v
// / ffn_down in the layers that matter most, Q4_K or Q5_K elsewhere).
enum class ConvertRecipe { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M };

struct RecipeInfo {
  const char* name;
  ConvertRecipe recipe;
  DType type;               // the matrices' type (of most of them, in a mix)
  std::uint32_t file_type;  // llama.cpp's llama_ftype
};
inline constexpr RecipeInfo kRecipes[] = {
    {"f32", ConvertRecipe::F32, DType::F32, 0},        {"f16", ConvertRecipe::F16, DType::F16, 1},
    {"bf16", ConvertRecipe::BF16, DType::BF16, 32},    {"q8_0", ConvertRecipe::Q8_0, DType::Q8_0, 7},
    {"q4_0", ConvertRecipe::Q4_0, DType::Q4_0, 2},     {"q4_1", ConvertRecipe::Q4_1, DType::Q4_1, 3},
    {"q5_0", ConvertRecipe::Q5_0, DType::Q5_0, 8},     {"q5_1", ConvertRecipe::Q5_1, DType::Q5_1, 9},
    {"q4_k", ConvertRecipe::Q4_K, DType::Q4_K, 14},    {"q5_k", ConvertRecipe::Q5_K, DType::Q5_K, 16},
    {"q6_k", ConvertRecipe::Q6_K, DType::Q6_K, 18},    {"q4_k_m", ConvertRecipe::Q4_K_M, DType::Q4_K, 15},
    {"q5_k_m", ConvertRecipe::Q5_K_M, DType::Q5_K, 17}};

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

// The type of one tensor. Vectors stay F32; a matrix whose rows do not fill
// whole blocks falls back as llama.cpp's quantiser does: a K-quant to the
// blocks of 32 with about its bits (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
// Q8_0), and anything to F16 if those do not fit either.
inline DType tensor_type(ConvertRecipe r, const std::string& name, std::int64_t row_len, std::int64_t layer, std::int64_t layers,
                         bool tied_output) {
  DType t = recipe_info(r).type;
  if (r == ConvertRecipe::Q4_K_M || r == ConvertRecipe::Q5_K_M) {
    // More bits where quantisation hurts most: first and last eighth, and every third layer between.
    const bool more = layer >= 0 && (layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2);
    const bool output = name == "output.weight" || (tied_output && name == "token_embd.weight");
    const bool sensitive = name.find("attn_v.weight") != std::string::npos || name.find("ffn_down.weight") != std::string::npos;
    if (output || (sensitive && more)) t = DType::Q6_K;
  }
  if (row_len % traits(t).block_elems != 0 && traits(t).block_elems == 256)
    t = t == DType::Q4_K ? DType::Q5_0 : t == DType::Q5_K ? DType::Q5_1 : DType::Q8_0;
  if (row_len % traits(t).block_elems != 0) t = DType::F16;
  return t;
}

// The llama architecture's keys and the tokenizer's, as llama.cpp reads them.
inline void write_llama_metadata(GgufWriter& w, const ModelShape& s, const SentencePieceModel& sp, ConvertRecipe recipe,
                                 const std::string& name) {
  if (static_cast<std::int64_t>(sp.pieces.size()) != s.vocab)
    throw InputError("the tokenizer has " + std::to_string(sp.pieces.size()) + " pieces, the model's vocabulary " +
                     std::to_string(s.vocab));
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

// One tensor of f32 values, in the recipe's type for it.
inline void add_converted_tensor(GgufWriter& w, ConvertRecipe recipe, const std::string& name,
                                 const std::vector<std::int64_t>& dims, const float* data, std::int64_t layers,
                                 bool tied_output) {
  std::int64_t layer = -1;
  if (name.rfind("blk.", 0) == 0) layer = std::stoll(name.substr(4));
  const DType type = dims.size() == 1 ? DType::F32 : tensor_type(recipe, name, dims[0], layer, layers, tied_output);
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
  const MappedFile f(model_path);
  bool shared = true;
  const ModelShape s = read_llama2c_shape(f, &shared);
  GgufWriter w;
  write_llama_metadata(w, s, SentencePieceModel::read(tokenizer_path), recipe, name);
  for (const auto& t : llama2c_tensors(f)) try {
      add_converted_tensor(w, recipe, t.name, t.dims, t.data, s.layers, shared);
    } catch (const InputError& e) {  // a value the type cannot hold: the input file's fault
      throw FileError(model_path, e.what());
    }
  w.write(out_path);
}

}  // namespace streamllm::io
