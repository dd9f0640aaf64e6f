// The model shapes the fuzzers load and run: one layer, grouped-query
// attention, a cache of 8 tokens. FuzzShape's rows of 32 and 64 fill the
// blocks of 32; FuzzShapeK's rows of 256 the K-quants' and IQ4_XS's
// super-blocks, so that every weight type's decoder and kernels are reached.
#pragma once

#include "streamllm/core/config.hpp"

namespace streamllm::fuzz {
using FuzzShape = LlamaConfig<32, 64, 1, 2, 1, 6, 8>;
using FuzzShapeK = LlamaConfig<256, 256, 1, 2, 1, 6, 8>;
}  // namespace streamllm::fuzz
