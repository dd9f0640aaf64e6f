// How work is split over OpenMP threads: contiguous ranges, one per thread, so
// that each thread streams its own part of a weight matrix front to back.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace streamllm::kernels {

// Waking a second thread costs about a microsecond; below this many
// multiply-adds a kernel runs on the calling thread.
inline constexpr std::size_t kMinParallelWork = std::size_t(1) << 17;

// [begin, end) of `total` items for thread `t` of `nt`, cut at multiples of `grain`.
inline std::pair<std::size_t, std::size_t> thread_range(std::size_t total, std::size_t grain,
                                                       int t, int nt) {
  const std::size_t units = (total + grain - 1) / grain;
  const std::size_t b = units * static_cast<std::size_t>(t) / static_cast<std::size_t>(nt);
  const std::size_t e = units * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(nt);
  return {std::min(total, b * grain), std::min(total, e * grain)};
}

// Runs body(begin, end) over `total` items split into per-thread ranges.
template <class Body>
inline void parallel_ranges(std::size_t total, std::size_t grain, std::size_t work, Body&& body) {
  if (work < kMinParallelWork || omp_get_max_threads() == 1 || omp_in_parallel()) {
    body(std::size_t(0), total);
    return;
  }
#pragma omp parallel
  {
    const auto [b, e] = thread_range(total, grain, omp_get_thread_num(), omp_get_num_threads());
    if (b < e) body(b, e);
  }
}

// Runs body(begin, end) over `total` items in chunks of `chunk` that the
// threads take in turn as they finish: memory-bound loops whose threads do not
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
