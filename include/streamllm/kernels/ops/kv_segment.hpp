// What attention reads: runs of cached keys and values of consecutive text
// positions. A cache (cache/) answers a query with these; the attention
// kernel (attention.hpp) reads them without knowing which cache they are from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

namespace streamllm {

// A run of keys (and their values) of consecutive text positions: key j of
// kv head h is at k + j * stride + h * head_dim, at text position
// first_pos + j. `sink` keys are read with the query rotated at its cache
// position rather than its text position (see sink_window_cache.hpp).
struct KVSegment {
  const float* k = nullptr;
  const float* v = nullptr;
  std::size_t stride = 0;
  std::int64_t count = 0;
  bool sink = false;
  std::int64_t first_pos = 0;
};

// Most segments a cache returns for one query.
inline constexpr int kMaxCacheSegments = 3;

// A window wider than any stream: the dense cache's.
inline constexpr std::int64_t kUnboundedWindow = std::numeric_limits<std::int64_t>::max() / 4;

}  // namespace streamllm
