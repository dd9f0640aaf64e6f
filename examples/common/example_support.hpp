// What the example programs share: default data paths and run-time settings.
#pragma once

#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace examples {

// $STREAMLLM_DATA_DIR, else the folder CMake found (../shared), else "".
inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("STREAMLLM_DATA_DIR"); env && *env) return env;
  return STREAMLLM_DEFAULT_DATA_DIR;
}

inline std::string default_model() {
  const auto dir = data_dir();
  return dir.empty() ? std::string() : (dir / "models" / "stories260K.bin").string();
}

// The SentencePiece model that goes with a vocabulary size, from the data folder.
inline std::string default_tokenizer(long vocab) {
  const auto dir = data_dir();
  if (dir.empty()) return {};
  return (dir / "models" / (vocab == 512 ? "tok512.model" : "tokenizer.model")).string();
}

inline void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace examples
