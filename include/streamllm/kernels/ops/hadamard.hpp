// The Hadamard rotation of each head that a Q4_0 cache stores its rows in
// (quant/kv_types.hpp says why). Orthonormal and symmetric, so it is its own
// inverse: applied to a key and its query alike it leaves their dot product,
// applied to the attention output it undoes the values' rotation.
//
// A head of width 2^k is rotated whole; any other width (48 = 3 x 16) in
// chunks of the largest power of two that divides it.
#pragma once

#include <cmath>
#include <cstddef>

namespace streamllm::kernels {

// The chunk a head of this width is rotated in.
constexpr std::size_t hadamard_chunk(std::size_t head_dim) { return head_dim & (~head_dim + 1); }

// x (n floats, whole heads) rotated in place: the fast Walsh-Hadamard
// transform of each chunk, scaled by 1/sqrt(chunk).
inline void hadamard_heads(float* x, std::size_t n, std::size_t head_dim) {
  const std::size_t c = hadamard_chunk(head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c));
  for (std::size_t base = 0; base < n; base += c) {
    float* y = x + base;
    for (std::size_t h = 1; h < c; h *= 2)
      for (std::size_t i = 0; i < c; i += 2 * h)
        for (std::size_t j = i; j < i + h; ++j) {
          const float a = y[j], b = y[j + h];
          y[j] = a + b;
          y[j + h] = a - b;
        }
    for (std::size_t j = 0; j < c; ++j) y[j] *= scale;
  }
}

}  // namespace streamllm::kernels
