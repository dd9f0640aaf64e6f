// convert: a llama2.c checkpoint and its tokenizer (a SentencePiece .model or
// a Hugging Face tokenizer.json) to one GGUF file, in any supported weight
// type; or, without --model, the tokenizer alone to a vocabulary-only GGUF.
//
//   convert --model stories260K.bin --tokenizer tok512.model --type q8_0 --out stories260K-Q8_0.gguf
//   convert --tokenizer tokenizer.json --out llama3-vocab.gguf
#include <CLI/CLI.hpp>

#include <cstdio>

#include "common/report_failures.hpp"
#include "streamllm/loaders/convert.hpp"
#include "streamllm/text/tokenizer.hpp"

int main(int argc, char** argv) {
  std::string model, tokenizer, out, type = "f32", name = "llama";
  CLI::App app{
      "Convert a llama2.c checkpoint (+ its tokenizer) to GGUF, quantised to a weight type; or a tokenizer alone to a "
      "vocabulary-only GGUF."};
  app.add_option("-m,--model", model, "llama2.c .bin checkpoint (none: write the vocabulary only)");
  app.add_option("-z,--tokenizer", tokenizer,
                 "the model's vocabulary: a SentencePiece .model, or a Hugging Face tokenizer.json (byte-level BPE; "
                 "tokenizer_config.json beside it gives BOS, EOS and the chat template)")
      ->required();
  app.add_option("-o,--out", out, "GGUF file to write")->required();
  app.add_option("-t,--type", type, streamllm::loaders::recipe_names())->capture_default_str();
  app.add_option("--name", name, "general.name")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return examples::report_failures("convert", [&] {
    if (model.empty()) {
      examples::step("writing the vocabulary of " + tokenizer);
      streamllm::loaders::convert_tokenizer_to_gguf(tokenizer, out, name);
      const auto tok = streamllm::Tokenizer::load(out);
      std::printf("wrote %s: a vocabulary of %d tokens (%s)\n", out.c_str(), tok.vocab_size(),
                  tok.byte_level() ? "byte-level BPE" : "SentencePiece");
      return 0;
    }
    examples::step("converting " + model + " to " + type + " (a tensor's converted copy)");
    streamllm::loaders::convert_llama2c_to_gguf(model, tokenizer, out, streamllm::loaders::parse_recipe(type), name);
    const streamllm::formats::GgufFile f(out);
    std::size_t by_type[64] = {};
    for (const auto& t : f.tensors()) ++by_type[static_cast<std::uint32_t>(t.type)];
    std::printf("wrote %s: %zu tensors (", out.c_str(), f.tensors().size());
    bool first = true;
    for (std::uint32_t i = 0; i < 64; ++i)
      if (by_type[i]) {
        std::printf("%s%zu %s", first ? "" : ", ", by_type[i],
                    std::string(streamllm::dtype_name(static_cast<streamllm::DType>(i))).c_str());
        first = false;
      }
    std::printf(")\n");
    return 0;
  });
}
