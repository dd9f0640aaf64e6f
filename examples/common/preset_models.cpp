// The one translation unit that compiles the model of every preset, and its loader, for the
// example programs (preset_models.hpp).
#include "common/preset_models.hpp"

#define STREAMLLM_EXAMPLES_MODEL(P)                         \
  template class streamllm::Llama<streamllm::presets::P>; \
  template streamllm::Llama<streamllm::presets::P> streamllm::load_llama(const std::string&, streamllm::LoadMode);
STREAMLLM_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_MODEL)
#undef STREAMLLM_EXAMPLES_MODEL
