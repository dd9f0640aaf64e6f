// Opening a model file of any supported format: the format is told by its
// first bytes, not by its name.
#pragma once

#include <cstring>
#include <string>

#include "streamllm/core/config.hpp"
#include "streamllm/formats/gguf.hpp"
#include "streamllm/formats/mapped_file.hpp"
#include "streamllm/loaders/gguf_model.hpp"
#include "streamllm/loaders/llama2c.hpp"
#include "streamllm/model/llama.hpp"

namespace streamllm {

enum class ModelFormat { Llama2c, Gguf };

// GGUF by its magic, or by its name (so that a .gguf file with a broken
// magic is reported as such); anything else is read as llama2.c.
inline ModelFormat detect_format(const std::string& path) {
  const formats::MappedFile f(path);
  if (f.size() >= 4 && std::memcmp(f.data(), "GGUF", 4) == 0) return ModelFormat::Gguf;
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return ModelFormat::Gguf;
  return ModelFormat::Llama2c;
}

struct ModelFileInfo {
  ModelFormat format;
  ModelShape shape;  // for GGUF, max_seq is llama.context_length (not enforced)
};

// The shape a model file declares, for dispatching to a preset.
inline ModelFileInfo read_model_info(const std::string& path) {
  if (detect_format(path) == ModelFormat::Gguf) return {ModelFormat::Gguf, loaders::gguf_shape(formats::GgufFile(path))};
  const formats::MappedFile f(path);
  return {ModelFormat::Llama2c, loaders::read_llama2c_shape(f)};
}

using formats::LoadMode;

template <class Config>
ModelWeights<Config> load_weights(const std::string& path, LoadMode mode = LoadMode::Mapped,
                                  WeightLayout layout = WeightLayout::ForKernels) {
  return detect_format(path) == ModelFormat::Gguf ? loaders::load_gguf<Config>(path, mode, layout)
                                                  : loaders::load_llama2c<Config>(path, mode, layout);
}

// Maps a checkpoint (llama2.c .bin or GGUF) and checks it against the
// template: the usual way in. LoadMode::InMemory reads it into huge-page
// memory instead of mapping it.
template <class Config>
Llama<Config> load_llama(const std::string& path, LoadMode mode = LoadMode::Mapped) {
  return Llama<Config>(load_weights<Config>(path, mode));
}

}  // namespace streamllm
