// The one translation unit that compiles the model for the test shape.
#include "streamllm/model.hpp"

template class streamllm::Llama<streamllm::presets::Stories260K>;
