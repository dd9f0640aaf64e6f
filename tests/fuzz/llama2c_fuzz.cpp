// libFuzzer target: any bytes as a llama2.c checkpoint: the header's checks,
// the sizes its fields imply (checked arithmetic: a crafted header must not
// wrap them), every tensor the converter would read, and (when the bytes
// hold a whole model of FuzzShape) the loader and a forward pass. Only
// streamllm::Error may come out; AddressSanitizer catches any read past
// the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_models.hpp"
#include "streamllm/loaders/llama2c.hpp"

namespace {

// The bytes as a file, since the reader maps files: one memory file for the
// whole run, rewritten for each input.
const std::string& as_file(const std::uint8_t* data, std::size_t size) {
  static const int fd = ::memfd_create("fuzz-llama2c", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (::ftruncate(fd, 0) != 0 || (size > 0 && ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) std::abort();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = as_file(data, size);
  try {
    const streamllm::formats::MappedFile f(path);
    float sum = 0;  // every element the converter would read
    for (const auto& t : streamllm::loaders::llama2c_tensors(f)) {
      std::int64_t n = 1;
      for (auto d : t.dims) n *= d;
      for (std::int64_t i = 0; i < n; ++i) sum += t.data[i];
    }
    volatile float sink = sum;
    (void)sink;
  } catch (const streamllm::Error&) {}
  try {
    streamllm::fuzz::run_llama2c_model(path);
  } catch (const streamllm::Error&) {}
  return 0;
}
