// Cache-line aligned buffers for activations and scratch space.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <utility>
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

// Address space set aside up front and made usable a part at a time:
// a buffer that grows in place, never copied, and whose memory the system
// gives only to the pages written (zeros before). Fresh memory is costly
// to take, most on a virtual machine, where a page first touched faults
// into the host too: a KV cache grown by copying into a new one twice its
// size paid that inside a chat turn. Reserved without
// access and without swap or commit charge; commit() opens a range for
// reading and writing, so what lies past it faults if touched. (Each range
// opened inside a reserve is a mapping of its own: the system's limit,
// vm.max_map_count, 65530 by default, bounds how many live at once.)
class ReservedMemory {
 public:
  ReservedMemory() = default;
  // `huge`: ask for 2 MB pages, where their size wastes little of a commit.
  ReservedMemory(std::size_t bytes, bool huge) : size_(bytes) {
#if defined(__linux__)
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<std::byte*>(p);
#if defined(MADV_HUGEPAGE)
    ::madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
#else
    (void)huge;
    base_ = static_cast<std::byte*>(std::calloc(1, std::max<std::size_t>(1, bytes)));
    if (!base_) throw std::bad_alloc();
#endif
  }
  ReservedMemory(ReservedMemory&& o) noexcept : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ReservedMemory& operator=(ReservedMemory&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(size_, o.size_);
    return *this;
  }
  ReservedMemory(const ReservedMemory&) = delete;
  ReservedMemory& operator=(const ReservedMemory&) = delete;
  ~ReservedMemory() {
#if defined(__linux__)
    if (base_) ::munmap(base_, size_);
#else
    std::free(base_);
#endif
  }

  // Makes [offset, offset + bytes) (offset a multiple of page()) readable and writable.
  void commit(std::size_t offset, std::size_t bytes) {
#if defined(__linux__)
    const std::size_t len = std::min(size_ - offset, (bytes + page() - 1) / page() * page());
    if (len > 0 && ::mprotect(base_ + offset, len, PROT_READ | PROT_WRITE) != 0) throw std::bad_alloc();
#else
    (void)offset, (void)bytes;
#endif
  }

  std::byte* data() const { return base_; }
  std::size_t size() const { return size_; }
  static std::size_t page() {
#if defined(__linux__)
    static const auto bytes = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return bytes;
#else
    return 4096;
#endif
  }

 private:
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
};

// Grows, never shrinks: after the first call of a given size the token loop
// allocates nothing.
template <class T>
T* grow(AlignedVector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace streamllm
