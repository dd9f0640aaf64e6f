// Opening a model file of any supported format: the format is told by its
// first bytes, not by its name.
#pragma once

#include <string>

#include "streamllm/config.hpp"
#include "streamllm/io/llama2c.hpp"
#include "streamllm/io/mapped_file.hpp"
#include "streamllm/model.hpp"

namespace streamllm {

enum class ModelFormat { Llama2c, Gguf };

inline ModelFormat detect_format(const io::MappedFile& f) {
  if (f.size() >= 4 && std::memcmp(f.data(), "GGUF", 4) == 0) return ModelFormat::Gguf;
  return ModelFormat::Llama2c;
}

// The shape a model file declares, for dispatching to a preset.
inline ModelShape read_model_shape(const std::string& path) {
  const io::MappedFile f(path);
  if (detect_format(f) == ModelFormat::Gguf)
    throw FileError(path, "GGUF files are not supported by this build");
  return io::read_llama2c_shape(f);
}

template <class Config>
ModelWeights<Config> load_weights(const std::string& path) {
  {
    const io::MappedFile f(path);
    if (detect_format(f) == ModelFormat::Gguf)
      throw FileError(path, "GGUF files are not supported by this build");
  }
  return io::load_llama2c<Config>(path);
}

// Maps a checkpoint and checks it against the template: the usual way in.
template <class Config>
Llama<Config> load_llama(const std::string& path) {
  return Llama<Config>(load_weights<Config>(path));
}

}  // namespace streamllm
