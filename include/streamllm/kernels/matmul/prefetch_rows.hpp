// The tiles (gemm.hpp) read a weight matrix a block of rows x kc columns at a
// time, converting each block before its arithmetic: without help the reads
// of the next block wait for memory after this block's arithmetic is done.
// What the driver reads next from a row is the next kc columns, or after the
// last of them the row a block further down (next_slice).
//
// Two ways to ask for it early:
//   - prefetch_next_slice: while a block is converted, each of its rows asks
//     for its next slice at once; without it the conversion's first loads
//     waited for memory.
//   - NextSlice, spread over a micro-kernel's blocks (the AVX-512 int8 tiles):
//     a few lines per block of arithmetic, so that the next slice streams in
//     while this one is multiplied. Asked for in one burst, the lines took
//     the core's few miss buffers and the conversion waited for memory all
//     the same.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "streamllm/core/tensor.hpp"

namespace streamllm::kernels {

// `bytes` of each of some rows, the first at `rows`, the next `ld` further,
// `count` of them at most (the matrix's end).
struct NextSlice {
  const std::byte* rows = nullptr;
  std::size_t ld = 0, bytes = 0, count = 0;
};

// Where the driver reads next from row `row` of a block of `block_rows` rows
// after columns up to k1, kc columns of it: empty after the matrix's end.
inline NextSlice next_slice(const TensorView& w, std::size_t row, std::size_t block_rows, std::size_t k1, std::size_t kc) {
  const auto rows = static_cast<std::size_t>(w.rows);
  const std::byte* p = nullptr;
  std::size_t first = row;
  if (k1 < static_cast<std::size_t>(w.cols))
    p = w.row(static_cast<std::int64_t>(row)) + row_bytes(w.type, static_cast<std::int64_t>(k1));
  else if ((first = row + block_rows) < rows)
    p = w.row(static_cast<std::int64_t>(first));
  if (!p) return {};
  return {p, static_cast<std::size_t>(w.row_stride), static_cast<std::size_t>(row_bytes(w.type, static_cast<std::int64_t>(kc))),
          rows - first};
}

// One line asked for, in a loop the compiler keeps. GCC 12 deletes a loop
// whose body is only __builtin_prefetch (no side effect, and assumed to end:
// -ffinite-loops) once it is inlined; the empty volatile asm is a side
// effect that emits nothing.
template <int Locality>
inline void prefetch_line(const std::byte* p) {
  __builtin_prefetch(p, 0, Locality);
  asm volatile("");
}

inline void prefetch_next_slice(const TensorView& w, std::size_t row, std::size_t block_rows, std::size_t k1, std::size_t kc) {
  const NextSlice next = next_slice(w, row, block_rows, k1, kc);
  for (std::size_t b = 0; b < next.bytes; b += 64) prefetch_line<2>(next.rows + b);
}

// Block b of a micro-kernel's arithmetic asks for line b of each of its
// rows' next slice (the row's last line once b is past it): one line per
// row and block, no branch, no division. A slice's row is at most 34 bytes
// per block of 32 columns (Q8_0), so the lines are all asked for by the
// last block.
inline void prefetch_line_of_rows(const NextSlice& next, std::size_t rows, std::size_t b) {
  if (!next.rows) return;
  const std::size_t at = std::min(64 * b, next.bytes - 1);
  for (std::size_t i = 0; i < std::min(rows, next.count); ++i) prefetch_line<3>(next.rows + i * next.ld + at);
}

}  // namespace streamllm::kernels
