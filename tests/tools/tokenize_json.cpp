// tokenize_json VOCAB.gguf: reads a JSON array of texts on stdin and writes,
// for each, its token ids (special tokens parsed, no BOS) and whether
// decoding them gives the text back. The Node test of the BPE tokenizer
// against npm's Llama 3 tokenizer drives it.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "streamllm/text/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tokenize_json VOCAB.gguf < texts.json\n");
    return 2;
  }
  try {
    const auto tok = streamllm::Tokenizer::load(argv[1]);
    const auto texts = nlohmann::json::parse(std::cin);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : texts) {
      const std::string text = t.get<std::string>();
      const auto ids = tok.encode(text, false, true);
      out.push_back({{"ids", ids}, {"round_trip", tok.decode(ids, true) == text}});
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize_json: %s\n", e.what());
    return 1;
  }
}
