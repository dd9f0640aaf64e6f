// A read-only memory mapping of a whole file. Weights are views into it, never
// copies: a 7B checkpoint costs page cache, not heap.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
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
