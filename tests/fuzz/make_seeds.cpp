// Writes small valid GGUF files as the GGUF fuzzer's seed corpus (every
// metadata type, string and numeric arrays, a whole model in each weight
// type), and, given a second folder, llama2.c checkpoints as the llama2.c
// fuzzer's.
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz_shape.hpp"
#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/formats/sentencepiece_model.hpp"
#include "streamllm/loaders/llama2c.hpp"
#include "streamllm/quant/blocks.hpp"

namespace {

// A Llama of shape C with matrices in `type` (norms stay F32).
template <class C>
void write_model(const std::string& path, streamllm::DType type) {
  using streamllm::DType;
  namespace formats = streamllm::formats;
  namespace loaders = streamllm::loaders;
  streamllm::formats::GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("llama.embedding_length", std::uint32_t(C::Dim));
  w.set("llama.feed_forward_length", std::uint32_t(C::HiddenDim));
  w.set("llama.block_count", std::uint32_t(C::Layers));
  w.set("llama.attention.head_count", std::uint32_t(C::Heads));
  w.set("llama.attention.head_count_kv", std::uint32_t(C::KVHeads));
  w.set("llama.rope.freq_base", 10000.0f);
  w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::uint32_t seed = 1;
  auto add = [&](const std::string& name, DType t, std::int64_t rows, std::int64_t cols) {
    std::vector<float> x(static_cast<std::size_t>(rows * cols));
    for (float& v : x) v = static_cast<float>((seed = seed * 1103515245u + 12345u) >> 16 & 255u) / 128.0f - 1.0f;
    const std::int64_t rb = streamllm::row_bytes(t, cols);
    std::vector<std::byte> b(static_cast<std::size_t>(rb * rows));
    for (std::int64_t r = 0; r < rows; ++r) streamllm::quant::quantize_row(t, x.data() + r * cols, cols, b.data() + r * rb);
    w.add_tensor(name, t, rows == 1 ? std::vector<std::int64_t>{cols} : std::vector<std::int64_t>{cols, rows}, b);
  };
  add("token_embd.weight", type, C::Vocab, C::Dim);
  add("blk.0.attn_norm.weight", DType::F32, 1, C::Dim);
  add("blk.0.attn_q.weight", type, C::Dim, C::Dim);
  add("blk.0.attn_k.weight", type, C::KVDim, C::Dim);
  add("blk.0.attn_v.weight", type, C::KVDim, C::Dim);
  add("blk.0.attn_output.weight", type, C::Dim, C::Dim);
  add("blk.0.ffn_norm.weight", DType::F32, 1, C::Dim);
  add("blk.0.ffn_gate.weight", type, C::HiddenDim, C::Dim);
  add("blk.0.ffn_down.weight", type, C::Dim, C::HiddenDim);
  add("blk.0.ffn_up.weight", type, C::HiddenDim, C::Dim);
  add("output_norm.weight", DType::F32, 1, C::Dim);
  w.write(path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) return 2;
  const std::string dir = argv[1];
  using streamllm::DType;
  namespace formats = streamllm::formats;
  namespace loaders = streamllm::loaders;
  formats::GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("general.alignment", std::uint32_t(32));
  w.set("llama.embedding_length", std::uint32_t(64));
  w.set("llama.feed_forward_length", std::uint32_t(64));
  w.set("llama.block_count", std::uint32_t(1));
  w.set("llama.attention.head_count", std::uint32_t(8));
  w.set("llama.attention.head_count_kv", std::int32_t(4));
  w.set("llama.rope.freq_base", 10000.0f);
  w.set("general.flag", true);
  w.set("general.big", std::uint64_t(1) << 40);
  w.set("tokenizer.ggml.model", std::string("llama"));
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x41>",
                                                          "\xe2\x96\x81"
                                                          "a",
                                                          "b"});
  w.set("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, 0, -1, -2});
  w.set("tokenizer.ggml.token_type", std::vector<std::int32_t>{2, 3, 3, 6, 1, 1});
  std::vector<float> x(64 * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3;
  int n = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<std::byte> b(static_cast<std::size_t>(streamllm::row_bytes(t, 64) * 2));
    for (int r = 0; r < 2; ++r)
      streamllm::quant::quantize_row(t, x.data() + 64 * r, 64, b.data() + r * streamllm::row_bytes(t, 64));
    w.add_tensor("t" + std::to_string(n++), t, {64, 2}, b);
  }
  w.write(dir + "/seed-all-types.gguf");
  // Whole models of the fuzzer's shapes (tests/fuzz/fuzz_shape.hpp), one per
  // weight type, so the loader, every type's decoder and a forward pass run
  // on mutations of real files.
  for (DType t : streamllm::kFileTypes) {
    const std::string path = dir + "/seed-model-" + std::string(streamllm::dtype_name(t)) + ".gguf";
    if (streamllm::traits(t).block_elems == 256)
      write_model<streamllm::fuzz::FuzzShapeK>(path, t);
    else
      write_model<streamllm::fuzz::FuzzShape>(path, t);
  }
  formats::SentencePieceModel sp;
  sp.pieces = {{"<unk>", 0, formats::SentencePieceModel::Unknown},
               {"<s>", 0, formats::SentencePieceModel::Control},
               {"</s>", 0, formats::SentencePieceModel::Control},
               {"<0x41>", 0, formats::SentencePieceModel::Byte},
               {"\xe2\x96\x81"
                "a",
                -1, formats::SentencePieceModel::Normal},
               {"b", -2, formats::SentencePieceModel::Normal}};
  const std::string proto = sp.serialize();
  std::ofstream(dir + "/seed-tokenizer.model", std::ios::binary).write(proto.data(), static_cast<std::streamsize>(proto.size()));
  formats::GgufWriter empty;
  empty.set("general.architecture", std::string("llama"));
  empty.write(dir + "/seed-empty.gguf");
  if (argc == 3) {  // llama2.c checkpoints of FuzzShape: the classifier shared, and a separate one
    const streamllm::ModelShape s = streamllm::fuzz::FuzzShape::shape();
    for (const bool shared : {true, false}) {
      std::vector<float> floats(static_cast<std::size_t>(streamllm::loaders::llama2c_float_count(s, shared).value()));
      for (std::size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
      loaders::write_llama2c(std::string(argv[2]) + (shared ? "/seed-shared.bin" : "/seed-classifier.bin"), s, shared, floats);
    }
  }
  return 0;
}
