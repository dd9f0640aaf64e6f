// libFuzzer target: any bytes through the GGUF reader, the llama shape, the
// tokenizer metadata, (when the bytes hold a whole model of FuzzShape or
// FuzzShapeK) the weight loader and a forward pass, and the SentencePiece .model parser. Only streamllm::Error may come out;
// AddressSanitizer and UBSan catch any read outside the buffer and any
// undefined conversion of a value taken from the file.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz_models.hpp"
#include "streamllm/formats/gguf.hpp"
#include "streamllm/formats/sentencepiece_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  try {
    const auto f = std::make_shared<const streamllm::formats::GgufFile>(bytes, size, "fuzz-input");
    for (const auto& t : f->tensors())
      if (t.bytes > 0) {
        volatile std::byte last = t.data[t.bytes - 1];  // must be inside the buffer
        (void)last;
      }
    streamllm::fuzz::run_gguf_model(f);
  } catch (const streamllm::Error&) {}
  try {
    const streamllm::formats::GgufFile f(bytes, size, "fuzz-input");
    (void)streamllm::formats::SentencePieceModel::from_gguf(f).serialize();
  } catch (const streamllm::Error&) {}
  try {  // the same bytes as a SentencePiece .model (protobuf)
    (void)streamllm::formats::SentencePieceModel::parse({reinterpret_cast<const char*>(data), size}, "fuzz-input").serialize();
  } catch (const streamllm::Error&) {}
  return 0;
}
