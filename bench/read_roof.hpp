// This machine's read roof, measured inside the benchmark run that reports
// against it: the host's bandwidth drifts by tens of percent within minutes,
// so a decode row's share of a roof taken in another run says little. The
// measurement is ../shared/tools/machine-limits/rd's: a vector read-sum over
// one 1 GiB array (small pages, as `rd 1 6 0`), the best of six passes, on
// one thread or split in equal parts over two.
#pragma once

#include <omp.h>
#include <sys/mman.h>

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <stdexcept>

namespace bench {

struct ReadBandwidth {
  double best_gbs = 0, mean_gbs = 0;
};

inline ReadBandwidth measure_read_bandwidth(int threads, int passes = 6, std::size_t bytes = std::size_t{1} << 30) {
  using Batch = xsimd::batch<float>;
  constexpr std::size_t kStep = 4 * Batch::size;  // four accumulators: loads, not the adds, set the pace
  const std::size_t n = bytes / sizeof(float) / (kStep * 2) * (kStep * 2);
  void* mem = mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("measure_read_bandwidth: cannot map 1 GiB");
  madvise(mem, n * sizeof(float), MADV_NOHUGEPAGE);
  auto* a = static_cast<float*>(mem);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::size_t i = 0; i < n; ++i) a[i] = static_cast<float>(i & 15);
  ReadBandwidth r;
  float sink = 0;
  for (int p = 0; p < passes; ++p) {
    float total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const auto nt = static_cast<std::size_t>(omp_get_num_threads()), t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t part = n / nt / kStep * kStep, begin = part * t, end = begin + part;
      Batch s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
      for (std::size_t i = begin; i < end; i += kStep) {
        s0 += Batch::load_aligned(a + i);
        s1 += Batch::load_aligned(a + i + Batch::size);
        s2 += Batch::load_aligned(a + i + 2 * Batch::size);
        s3 += Batch::load_aligned(a + i + 3 * Batch::size);
      }
      total += xsimd::hadd((s0 + s1) + (s2 + s3));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += total;
    const double gbs = static_cast<double>(n * sizeof(float)) / s / 1e9;
    r.best_gbs = std::max(r.best_gbs, gbs);
    r.mean_gbs += gbs / passes;
  }
  munmap(mem, n * sizeof(float));
  if (sink < 0) throw std::logic_error("measure_read_bandwidth: a sum of non-negative numbers is negative");
  return r;
}

}  // namespace bench
