// The tiles (gemm.hpp) read a weight matrix a block of rows x kc columns at a
// time, converting each block before its arithmetic: without help the reads
// of the next block wait for memory after this block's arithmetic is done.
// While one block is converted, each of its rows asks for what the driver
// reads next from that row: the next kc columns, or after the last of them
// the row a block further down. With a few tokens (a chat turn) the
// arithmetic is short and that wait is not: a profile of a 16-token
// TinyLlama Q8_0 prefill on an AVX2 Zen 3 found a third of the time in the
// conversion's first loads (docs/performance-history.md has the turn's times).
#pragma once

#include <cstddef>
#include <cstdint>

#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

inline void prefetch_next_slice(const TensorView& w, std::size_t row, std::size_t block_rows, std::size_t k1, std::size_t kc) {
  const std::byte* p = nullptr;
  if (k1 < static_cast<std::size_t>(w.cols))
    p = w.row(static_cast<std::int64_t>(row)) + row_bytes(w.type, static_cast<std::int64_t>(k1));
  else if (row + block_rows < static_cast<std::size_t>(w.rows))
    p = w.row(static_cast<std::int64_t>(row + block_rows));
  if (!p) return;
  const auto bytes = static_cast<std::size_t>(row_bytes(w.type, static_cast<std::int64_t>(kc)));
  for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);
}

}  // namespace streamllm::kernels
