// A read-only memory mapping of a whole file. Weights are views into it, never
// copies: a 7B checkpoint costs page cache, not heap.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "streamllm/core/error.hpp"

namespace streamllm::formats {

// How a model file reaches memory: mapped (zero-copy, shared with the page
// cache, the default), or read into anonymous memory backed by huge pages
// (llama.cpp's --no-mmap), which some hosts stream faster.
enum class LoadMode { Mapped, InMemory };

class MappedFile {
 public:
  // Throws FileError when the file is missing, is not a regular file, is
  // empty, or cannot be mapped (or read).
  explicit MappedFile(std::string path, LoadMode mode = LoadMode::Mapped) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw FileError(path_, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw FileError(path_, std::string("cannot stat: ") + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw FileError(path_, "is not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) {
      ::close(fd);
      throw FileError(path_, "is empty (0 bytes)");
    }
    if (mode == LoadMode::InMemory) {
      read_into_memory(fd);
      ::close(fd);
      return;
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) throw FileError(path_, std::string("cannot mmap: ") + std::strerror(err));
    data_ = static_cast<const std::byte*>(p);
    mapped_ = size_;
    // Weights are streamed front to back once per token: tell the kernel.
    ::madvise(p, size_, MADV_WILLNEED);
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), mapped_);
  }

  // Reads every page once, so that the first token does not pay for page
  // faults; progress(bytes done, bytes in all) is called every few percent.
  template <class Progress>
  void touch_pages(Progress&& progress) const {
    constexpr std::size_t kPage = 4096, kStep = std::size_t(1) << 24;  // report every 16 MiB
    volatile unsigned char sink = 0;
    for (std::size_t at = 0; at < size_; at += kStep) {
      const std::size_t end = std::min(size_, at + kStep);
      for (std::size_t p = at; p < end; p += kPage) sink = sink + static_cast<unsigned char>(data_[p]);
      progress(end, size_);
    }
  }

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  void read_into_memory(int fd) {
    constexpr std::size_t kHuge = std::size_t(2) << 20;
    mapped_ = (size_ + kHuge - 1) / kHuge * kHuge;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw FileError(path_, std::string("cannot allocate ") + std::to_string(mapped_) + " bytes: " + std::strerror(err));
    }
    ::madvise(p, mapped_, MADV_HUGEPAGE);
    auto* dst = static_cast<char*>(p);
    for (std::size_t at = 0; at < size_;) {
      const ssize_t got = ::pread(fd, dst + at, std::min<std::size_t>(size_ - at, std::size_t(1) << 26), static_cast<off_t>(at));
      if (got <= 0) {
        const int err = got < 0 ? errno : EIO;
        ::munmap(p, mapped_);
        ::close(fd);
        throw FileError(path_, std::string("read failed at byte ") + std::to_string(at) + ": " + std::strerror(err));
      }
      at += static_cast<std::size_t>(got);
    }
    ::mprotect(p, mapped_, PROT_READ);
    data_ = static_cast<const std::byte*>(p);
  }

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;
};

inline std::shared_ptr<const MappedFile> map_file(const std::string& path, LoadMode mode = LoadMode::Mapped) {
  return std::make_shared<const MappedFile>(path, mode);
}

}  // namespace streamllm::formats
