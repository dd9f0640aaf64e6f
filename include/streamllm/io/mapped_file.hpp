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

#include "streamllm/error.hpp"

namespace streamllm::io {

class MappedFile {
 public:
  // Throws FileError when the file is missing, is not a regular file, is
  // empty, or cannot be mapped.
  explicit MappedFile(std::string path) : path_(std::move(path)) {
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
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) throw FileError(path_, std::string("cannot mmap: ") + std::strerror(err));
    data_ = static_cast<const std::byte*>(p);
    // Weights are streamed front to back once per token: tell the kernel.
    ::madvise(p, size_, MADV_WILLNEED);
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
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
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

inline std::shared_ptr<const MappedFile> map_file(const std::string& path) {
  return std::make_shared<const MappedFile>(path);
}

}  // namespace streamllm::io
