// What the example programs share: default data paths and run-time settings.
#pragma once

#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "data_dir.hpp"
#include "streamllm/loaders/model_file.hpp"

namespace examples {

inline std::string default_model() {
  const auto dir = data_dir();
  return dir.empty() ? std::string() : (dir / "models" / "stories260K.bin").string();
}

// A GGUF model carries its tokenizer; a llama2.c one gets the SentencePiece
// model of its vocabulary size from the data folder.
inline std::string default_tokenizer(const std::string& model, const streamllm::ModelFileInfo& info) {
  if (info.format == streamllm::ModelFormat::Gguf) return model;
  const auto dir = data_dir();
  if (dir.empty()) return {};
  return (dir / "models" / (info.shape.vocab == 512 ? "tok512.model" : "tokenizer.model")).string();
}

inline void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace examples
