// A view of a weight matrix in its file: type, shape, and where its rows are.
// Nothing is copied; the owner of the memory (a mapped file) outlives the view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "streamllm/core/dtype.hpp"

namespace streamllm {

// rows x cols, row-major, each row `row_stride` bytes apart. For a linear layer
// rows are output features and cols input features (y = W x), as in PyTorch,
// llama2.c and GGUF ("ne0" = cols).
struct TensorView {
  DType type = DType::F32;
  const std::byte* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = 0;  // bytes

  const std::byte* row(std::int64_t r) const { return data + r * row_stride; }
  const float* f32_row(std::int64_t r) const { return reinterpret_cast<const float*>(row(r)); }
  std::int64_t bytes() const { return rows * row_stride; }
  // Rows [begin, end), as a matrix of their own (the same memory).
  TensorView row_range(std::int64_t begin, std::int64_t end) const { return {type, row(begin), end - begin, cols, row_stride}; }

  static TensorView dense(DType t, const void* p, std::int64_t rows, std::int64_t cols) {
    return {t, static_cast<const std::byte*>(p), rows, cols, row_bytes(t, cols)};
  }
};

}  // namespace streamllm
