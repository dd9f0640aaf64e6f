// One row of a weight matrix to f32: the embedding lookup.
#pragma once

#include <cstdint>

#include "streamllm/core/tensor.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

inline void dequantize_row(const TensorView& w, std::int64_t r, float* out) {
  quant::dequantize_row(w.type, w.row(r), w.cols, out);
}

}  // namespace streamllm::kernels
