// What attention reads: runs of cached keys and values of consecutive text
// positions. A cache (cache/) answers a query with these; the attention
// kernel (attention.hpp) reads them without knowing which cache they are from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "streamllm/quant/kv_types.hpp"

namespace streamllm {

// A run of keys (and their values) of consecutive text positions, each a row
// of the model's KV width in its type (quant/kv_types.hpp): key j's row
// starts at k + j * k_stride bytes, and kv head h is its elements
// [h * head_dim, (h + 1) * head_dim); key j is at text position first_pos + j.
// `sink` keys are read with the query rotated at its cache position rather
// than its text position (see sink_window_cache.hpp).
struct KVSegment {
  const std::byte* k = nullptr;
  const std::byte* v = nullptr;
  std::size_t k_stride = 0, v_stride = 0;  // bytes from one position's row to the next
  KVTypes types;
  std::int64_t count = 0;
  bool sink = false;
  std::int64_t first_pos = 0;

  // A run of float rows, `stride` floats apart (the new tokens of a call).
  static KVSegment f32(const float* k, const float* v, std::size_t stride, std::int64_t count, bool sink, std::int64_t first_pos) {
    return {reinterpret_cast<const std::byte*>(k), reinterpret_cast<const std::byte*>(v), stride * sizeof(float),
            stride * sizeof(float), KVTypes{}, count, sink, first_pos};
  }
};

// Most segments a cache returns for one query.
inline constexpr int kMaxCacheSegments = 3;

// A window wider than any stream: the dense cache's.
inline constexpr std::int64_t kUnboundedWindow = std::numeric_limits<std::int64_t>::max() / 4;

}  // namespace streamllm
