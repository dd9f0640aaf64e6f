// How work is split over OpenMP threads: chunks of contiguous rows, each
// thread streaming a run of them front to back.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "streamllm/core/error.hpp"

namespace streamllm::kernels {

// Waking a second thread costs about a microsecond; below this many
// multiply-adds a kernel runs on the calling thread.
inline constexpr std::size_t kMinParallelWork = std::size_t(1) << 17;

namespace detail {

// A run of chunks [front, back) that its owner takes from the front and the
// other threads, once their own runs are done, from the back: one atomic
// word, so a chunk is handed out once however the takes interleave. Each on
// a cache line of its own: side by side, every take of one thread took the
// line from the other's core (decode 0-4% faster on 2 threads of Zen 5).
class alignas(64) ChunkRun {
 public:
  void assign(std::uint32_t front, std::uint32_t back) {
    bounds_.store(std::uint64_t(front) << 32 | back, std::memory_order_relaxed);
  }
  // The chunk taken, or -1 when the run is empty.
  std::int64_t take(bool from_front) {
    std::uint64_t old = bounds_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t front = old >> 32, back = old & 0xffffffffu;
      if (front >= back) return -1;
      const std::uint64_t next = from_front ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (bounds_.compare_exchange_weak(old, next, std::memory_order_relaxed))
        return static_cast<std::int64_t>(from_front ? front : back - 1);
    }
  }

 private:
  std::atomic<std::uint64_t> bounds_{0};
};

}  // namespace detail

// Runs body(begin, end) over `total` items in chunks of `chunk`. Each thread
// owns an equal run of consecutive chunks and takes them front to back, so
// it reads one run of memory, and a kernel's prefetch past the end of its
// chunk (the tiles') is for itself.
// A thread whose run is done takes single chunks from the back of another's:
// when one core runs slower for a while (a busy neighbour on a shared host)
// the loop still ends together. Taken in turn instead (OpenMP's dynamic
// schedule), the threads' chunks interleave: neither thread reads one run
// of memory, and both were slower.
template <class Body>
inline void parallel_chunks(std::size_t total, std::size_t chunk, std::size_t work, Body&& body) {
  if (work < kMinParallelWork || omp_get_max_threads() == 1 || omp_in_parallel()) {
    body(std::size_t(0), total);
    return;
  }
  const std::size_t chunks = (total + chunk - 1) / chunk;
  const auto threads = static_cast<std::size_t>(omp_get_max_threads());
  if (chunks > 0xffffffffu) throw Error("parallel_chunks: " + std::to_string(chunks) + " chunks, more than 2^32");
  const std::unique_ptr<detail::ChunkRun[]> runs(new detail::ChunkRun[threads]);
  for (std::size_t t = 0; t < threads; ++t)
    runs[t].assign(static_cast<std::uint32_t>(chunks * t / threads), static_cast<std::uint32_t>(chunks * (t + 1) / threads));
  const int team = static_cast<int>(threads);
#pragma omp parallel num_threads(team)
  {
    // A team smaller than asked for leaves runs without an owner: the others take them.
    const auto me = static_cast<std::size_t>(omp_get_thread_num());
    for (;;) {
      std::int64_t c = runs[me].take(true);
      for (std::size_t v = 1; c < 0 && v < threads; ++v) c = runs[(me + v) % threads].take(false);
      if (c < 0) break;
      const std::size_t b = static_cast<std::size_t>(c) * chunk;
      body(b, std::min(total, b + chunk));
    }
  }
}

}  // namespace streamllm::kernels
