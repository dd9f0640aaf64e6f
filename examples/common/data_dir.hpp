// Where the shared models and golden outputs are, for the examples, the
// tests and the benchmarks alike: $STREAMLLM_DATA_DIR, else the folder CMake
// found (STREAMLLM_DEFAULT_DATA_DIR: ../shared when it exists), else "".
#pragma once

#include <cstdlib>
#include <filesystem>

#ifndef STREAMLLM_DEFAULT_DATA_DIR
#define STREAMLLM_DEFAULT_DATA_DIR ""
#endif

namespace examples {

inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("STREAMLLM_DATA_DIR"); env && *env) return env;
  return STREAMLLM_DEFAULT_DATA_DIR;
}

}  // namespace examples
