// The shards' models and their loading (tensor parallel over 2 processes),
// compiled once for all the example programs (preset_models.hpp); a unit of
// their own, compiled beside preset_models.cpp.
#include "common/preset_models.hpp"

STREAMLLM_EXAMPLES_FOR_EACH_SHARDED(STREAMLLM_EXAMPLES_INSTANTIATE_SHARD)
