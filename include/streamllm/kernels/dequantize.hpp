// One row of a weight matrix to f32: the embedding lookup, and the oracle
// that every typed kernel is tested against.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "streamllm/error.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

inline void dequantize_row(const TensorView& w, std::int64_t r, float* out) {
  const std::byte* src = w.row(r);
  const auto n = static_cast<std::size_t>(w.cols);
  switch (w.type) {
    case DType::F32:
      std::memcpy(out, src, n * sizeof(float));
      return;
    default:
      throw Error("dequantize_row: weight type " + std::string(dtype_name(w.type)) +
                  " has no kernel in this build");
  }
}

}  // namespace streamllm::kernels
