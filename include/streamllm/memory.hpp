// Cache-line aligned buffers for activations and scratch space.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <vector>

namespace streamllm {

template <class T>
using AlignedVector = std::vector<T, xsimd::aligned_allocator<T, 64>>;

// Grows, never shrinks: after the first call of a given size the token loop
// allocates nothing.
template <class T>
T* grow(AlignedVector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace streamllm
