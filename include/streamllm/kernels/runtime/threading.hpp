// How work is split over threads: chunks of contiguous rows, each thread
// streaming a run of them front to back; the threads a team of our own,
// as many as OpenMP's setting says (omp_get_max_threads).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

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

// Spin-waits politely: the pause instruction where there is one.
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The threads that run parallel_chunks' jobs: the caller and workers that
// wait for the next job spinning on a counter, and sleep (a futex, through
// std::atomic::wait) only after a while without one. An OpenMP region's
// fork and join each wake the team with a system call; here a job starts
// and ends with a few cache-line transfers (figures: kernel-measurements.md).
class SpinTeam {
 public:
  static SpinTeam& instance() {
    static SpinTeam team;
    return team;
  }
  SpinTeam() = default;
  SpinTeam(const SpinTeam&) = delete;
  SpinTeam& operator=(const SpinTeam&) = delete;
  ~SpinTeam() { stop_workers(); }

  // Which of the team's threads this is, in a job; -1 outside one.
  static int& thread_index() {
    static thread_local int index = -1;
    return index;
  }
  static bool in_job() { return thread_index() >= 0; }

  // Runs job(i) for i in [0, threads), the caller taking 0; false (nothing
  // run) if another thread's job holds the team.
  template <class Job>
  bool run(int threads, Job&& job) {
    std::unique_lock lock(dispatch_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    // Exactly threads - 1 workers: every worker takes part in every job
    // (so none can lag a job behind), and none spins unused.
    if (static_cast<int>(workers_.size()) != threads - 1) {
      stop_workers();
      for (int index = 1; index < threads; ++index) {
        const std::uint32_t before = epoch_.load();  // this job is the next epoch
        workers_.emplace_back([this, index, before] { work(index, before); });
      }
    }
    job_ = [](const void* j, int i) { (*static_cast<const std::remove_reference_t<Job>*>(j))(i); };
    job_arg_ = &job;
    error_ = nullptr;
    pending_.store(static_cast<int>(workers_.size()));
    epoch_.fetch_add(1);
    if (sleepers_.load() > 0) epoch_.notify_all();
    run_one(0);
    while (pending_.load(std::memory_order_acquire) > 0) spin_pause();
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void stop_workers() {
    stop_.store(true);
    epoch_.fetch_add(1);
    epoch_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
    stop_.store(false);
  }

  void run_one(int index) {
    thread_index() = index;
    try {
      job_(job_arg_, index);
    } catch (...) {
      const std::lock_guard guard(error_lock_);
      if (!error_) error_ = std::current_exception();
    }
    thread_index() = -1;
  }

  void work(int index, std::uint32_t seen) {
    for (;;) {
      // Spin about a millisecond for the next job, then sleep until it comes.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      for (unsigned i = 0; epoch_.load(std::memory_order_acquire) == seen; ++i) {
        spin_pause();
        if ((i & 1023) == 1023 && std::chrono::steady_clock::now() > until) {
          sleepers_.fetch_add(1);
          epoch_.wait(seen);
          sleepers_.fetch_sub(1);
        }
      }
      seen = epoch_.load(std::memory_order_acquire);
      if (stop_.load()) return;
      run_one(index);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::mutex dispatch_;  // one job at a time
  std::vector<std::thread> workers_;
  void (*job_)(const void*, int) = nullptr;
  const void* job_arg_ = nullptr;
  std::mutex error_lock_;
  std::exception_ptr error_;
  // One more per job; 32 bits, a futex's word, for std::atomic::wait.
  alignas(64) std::atomic<std::uint32_t> epoch_{0};
  alignas(64) std::atomic<int> pending_{0};  // workers yet to finish this job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace detail

// Which of parallel_chunks' threads runs the calling code: 0 for the caller
// (and outside parallel_chunks), 1.. for the workers.
inline int team_thread() { return std::max(0, detail::SpinTeam::thread_index()); }

// Runs body(begin, end) over `total` items in chunks of `chunk`. Each thread
// owns an equal run of consecutive chunks and takes them front to back, so
// it reads one run of memory, and a kernel's prefetch past the end of its
// chunk (the tiles') is for itself.
// A thread whose run is done takes single chunks from the back of another's:
// when one core runs slower for a while (a busy neighbour on a shared host)
// the loop still ends together. Taken in turn instead (OpenMP's dynamic
// schedule), the threads' chunks interleave: neither thread reads one run
// of memory, and both were slower.
// The threads are omp_get_max_threads() of them, the caller and the
// workers of detail::SpinTeam; inside an OpenMP region or another
// parallel_chunks, or while another thread's job holds the team, the
// caller runs it all.
template <class Body>
inline void parallel_chunks(std::size_t total, std::size_t chunk, std::size_t work, Body&& body) {
  const int team = omp_get_max_threads();
  if (work < kMinParallelWork || team == 1 || omp_in_parallel() || detail::SpinTeam::in_job()) {
    body(std::size_t(0), total);
    return;
  }
  const std::size_t chunks = (total + chunk - 1) / chunk;
  const auto threads = static_cast<std::size_t>(team);
  if (chunks > 0xffffffffu) throw Error("parallel_chunks: " + std::to_string(chunks) + " chunks, more than 2^32");
  const std::unique_ptr<detail::ChunkRun[]> runs(new detail::ChunkRun[threads]);
  for (std::size_t t = 0; t < threads; ++t)
    runs[t].assign(static_cast<std::uint32_t>(chunks * t / threads), static_cast<std::uint32_t>(chunks * (t + 1) / threads));
  const auto job = [&](int thread) {
    const auto me = static_cast<std::size_t>(thread);
    for (;;) {
      std::int64_t c = runs[me].take(true);
      for (std::size_t v = 1; c < 0 && v < threads; ++v) c = runs[(me + v) % threads].take(false);
      if (c < 0) break;
      const std::size_t b = static_cast<std::size_t>(c) * chunk;
      body(b, std::min(total, b + chunk));
    }
  };
  if (!detail::SpinTeam::instance().run(team, job)) body(std::size_t(0), total);
}

}  // namespace streamllm::kernels
