// The model shape the GGUF fuzzer loads and runs: one layer, grouped-query
// attention, dims that fill whole quantisation blocks, a cache of 8 tokens.
#pragma once

#include "streamllm/config.hpp"

namespace streamllm::fuzz {
using FuzzShape = LlamaConfig<32, 64, 1, 2, 1, 6, 8>;
}
