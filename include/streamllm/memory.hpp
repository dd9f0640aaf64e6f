// Cache-line aligned buffers for activations and scratch space.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace streamllm {

#if defined(__linux__)
// madvise on the whole pages inside [data, data + bytes): the first and last
// pages of a matrix in a file may hold a neighbour's bytes, and keep them.
inline void advise_whole_pages(const void* data, std::size_t bytes, int advice) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(data), end = begin + bytes;
  const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, advice);
}
#endif

// Aligned to a cache line; buffers of 2 MiB and more are aligned to 2 MiB and
// asked for transparent huge pages. Prefill's activation buffers are MBs
// read and written by 16 x 16 transposes, 16 rows at a time, each row on its
// own 4 KiB page: TLB misses, not shuffles, bounded those transposes.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::size_t kLine = 64, kHuge = std::size_t(2) << 20;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    constexpr auto kMaxBytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) - kHuge;
    if (n > kMaxBytes / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = std::max<std::size_t>(1, n * sizeof(T));
    const std::size_t align = bytes >= kHuge ? kHuge : kLine;
    const std::size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

// Grows, never shrinks: after the first call of a given size the token loop
// allocates nothing.
template <class T>
T* grow(AlignedVector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace streamllm
