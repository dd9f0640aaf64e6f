// Writes small valid GGUF files as the fuzzer's seed corpus: every metadata
// type, string and numeric arrays, tensors of each weight type.
#include <cstdio>
#include <string>

#include "streamllm/io/gguf_writer.hpp"
#include "streamllm/quant/blocks.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  using streamllm::DType;
  namespace io = streamllm::io;
  io::GgufWriter w;
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
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81" "a", "b"});
  w.set("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, 0, -1, -2});
  w.set("tokenizer.ggml.token_type", std::vector<std::int32_t>{2, 3, 3, 6, 1, 1});
  std::vector<float> x(64 * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3;
  int n = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    std::vector<std::byte> b(static_cast<std::size_t>(streamllm::row_bytes(t, 64) * 2));
    for (int r = 0; r < 2; ++r) streamllm::quant::quantize_row(t, x.data() + 64 * r, 64, b.data() + r * streamllm::row_bytes(t, 64));
    w.add_tensor("t" + std::to_string(n++), t, {64, 2}, b);
  }
  w.write(dir + "/seed-all-types.gguf");
  io::GgufWriter empty;
  empty.set("general.architecture", std::string("llama"));
  empty.write(dir + "/seed-empty.gguf");
  return 0;
}
