// The model of every preset, and its loader, are compiled once for all the
// example programs, in preset_models.cpp. Each program dispatches
// over every preset (with_preset), and without these declarations each would
// compile seven forward passes, with every kernel under them, and seven
// loaders again. A program of your own can do the same for the shapes it uses.
#pragma once

#include "streamllm/loaders/model_file.hpp"
#include "streamllm/model.hpp"
#include "streamllm/presets.hpp"

#define STREAMLLM_EXAMPLES_EXTERN_MODEL(P)                       \
  extern template class streamllm::Llama<streamllm::presets::P>; \
  extern template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);
STREAMLLM_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_EXTERN_MODEL)
#undef STREAMLLM_EXAMPLES_EXTERN_MODEL

// The explicit instantiation the extern declarations above promise.
#define STREAMLLM_EXAMPLES_INSTANTIATE(P)                 \
  template class streamllm::Llama<streamllm::presets::P>; \
  template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);
