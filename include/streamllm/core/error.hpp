// Exceptions thrown by streamllm. Every message says what was wrong and where,
// so that a user can act on it without a debugger.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace streamllm {

// Base of everything the library throws on bad input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model or tokenizer file is missing, unreadable, corrupt, truncated, or
// does not match the shape named by the template parameters.
class FileError : public Error {
 public:
  FileError(std::string_view path, std::string_view problem)
      : Error("file '" + std::string(path) + "': " + std::string(problem)), path_(path) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// Arguments that cannot be honoured: token ids out of range, empty turns,
// options outside their domain.
class InputError : public Error {
 public:
  using Error::Error;
};

// A prompt or a generation does not fit in the KV cache that was given.
class CacheFullError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace streamllm
