// libFuzzer target: any bytes through the GGUF reader, the llama shape and
// the tokenizer metadata. Only streamllm::Error may come out; AddressSanitizer
// and UBSan catch any read outside the buffer.
#include <cstddef>
#include <cstdint>

#include "streamllm/io/gguf.hpp"
#include "streamllm/io/gguf_model.hpp"
#include "streamllm/io/sentencepiece_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const streamllm::io::GgufFile f(reinterpret_cast<const std::byte*>(data), size, "fuzz-input");
    for (const auto& t : f.tensors())
      if (t.bytes > 0) {
        volatile std::byte last = t.data[t.bytes - 1];  // must be inside the buffer
        (void)last;
      }
    (void)streamllm::io::gguf_shape(f);
  } catch (const streamllm::Error&) {
  }
  try {
    const streamllm::io::GgufFile f(reinterpret_cast<const std::byte*>(data), size, "fuzz-input");
    (void)streamllm::io::SentencePieceModel::from_gguf(f).serialize();
  } catch (const streamllm::Error&) {
  }
  return 0;
}
