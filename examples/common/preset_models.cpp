// The one translation unit that compiles the model of every preset, and its
// loader, for the example programs (preset_models.hpp). One unit, not one
// per preset: most of a unit's time is reading the library's headers.
#include "common/preset_models.hpp"

STREAMLLM_FOR_EACH_PRESET(STREAMLLM_EXAMPLES_INSTANTIATE)
