// A plain transpose of a small matrix: the tile drivers pack and unpack with
// it, and attention lays a block of keys out along the vector lanes.
#pragma once

#include <algorithm>
#include <cstddef>

namespace streamllm::kernels {

// dst[j][i] = src[i][j] for rows x cols, in 16 x 16 tiles so that both sides
// stay within a few cache lines (a plain loop over one side strides through
// memory and misses on every element).
template <class T>
inline void transpose(const T* src, std::size_t src_ld, std::size_t rows, std::size_t cols, T* dst, std::size_t dst_ld) {
  constexpr std::size_t kTile = 16;
  for (std::size_t i0 = 0; i0 < rows; i0 += kTile)
    for (std::size_t j0 = 0; j0 < cols; j0 += kTile) {
      const std::size_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (std::size_t i = i0; i < i1; ++i)
        for (std::size_t j = j0; j < j1; ++j) dst[j * dst_ld + i] = src[i * src_ld + j];
    }
}

}  // namespace streamllm::kernels
