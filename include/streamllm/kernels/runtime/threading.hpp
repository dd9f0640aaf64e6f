// How work is split over OpenMP threads: chunks of contiguous rows that the
// threads take in turn, each streaming its chunk front to back.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace streamllm::kernels {

// Waking a second thread costs about a microsecond; below this many
// multiply-adds a kernel runs on the calling thread.
inline constexpr std::size_t kMinParallelWork = std::size_t(1) << 17;

// Runs body(begin, end) over `total` items in chunks of `chunk` that the
// threads take in turn as they finish: loops whose threads do not
// all stream at the same speed (a busy neighbour on a shared host) end
// together instead of waiting for the slowest.
template <class Body>
inline void parallel_chunks(std::size_t total, std::size_t chunk, std::size_t work, Body&& body) {
  if (work < kMinParallelWork || omp_get_max_threads() == 1 || omp_in_parallel()) {
    body(std::size_t(0), total);
    return;
  }
  const auto chunks = static_cast<std::int64_t>((total + chunk - 1) / chunk);
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const auto b = static_cast<std::size_t>(c) * chunk;
    body(b, std::min(total, b + chunk));
  }
}

}  // namespace streamllm::kernels
