// The README's host program: load a checkpoint, stream a continuation.
#include <streamllm/streamllm.hpp>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  using Config = streamllm::presets::Stories260K;       // the model's shape, at compile time
  auto model = streamllm::load_llama<Config>(argv[1]);  // llama2.c .bin, memory-mapped
  streamllm::Tokenizer tok(argv[2]);                    // SentencePiece .model
  streamllm::KVCache<Config> cache;                     // one conversation's memory
  streamllm::GenerationOptions opt;
  opt.max_new_tokens = 40;
  streamllm::generate(model, tok, cache, "Once upon a time", opt, [](std::string_view piece) {
    std::cout << piece << std::flush;
    return true;
  });
  std::cout << "\n";
}
