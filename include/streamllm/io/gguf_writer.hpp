// GGUF writer (version 3): metadata, tensor infos, 32-byte aligned data. Used
// by the converter (llama2.c .bin to GGUF of any weight type) and by tests
// and benchmarks that need files of their own.
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "streamllm/dtype.hpp"
#include "streamllm/error.hpp"
#include "streamllm/io/gguf.hpp"

namespace streamllm::io {

class GgufWriter {
 public:
  using Value = std::variant<std::uint32_t, std::int32_t, float, bool, std::string, std::uint64_t, std::vector<std::string>,
                             std::vector<float>, std::vector<std::int32_t>>;

  void set(std::string key, Value v) {
    for (auto& [k, old] : kv_)
      if (k == key) {
        old = std::move(v);
        return;
      }
    kv_.emplace_back(std::move(key), std::move(v));
  }

  // dims: ne0 (the contiguous row length) first; bytes: rows in the type's layout.
  void add_tensor(std::string name, DType type, std::vector<std::int64_t> dims, std::vector<std::byte> bytes) {
    std::int64_t rows = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    if (static_cast<std::int64_t>(bytes.size()) != row_bytes(type, dims.at(0)) * rows)
      throw Error("GGUF writer: tensor '" + name + "' has " + std::to_string(bytes.size()) + " bytes, its shape needs " +
                  std::to_string(row_bytes(type, dims[0]) * rows));
    tensors_.push_back({std::move(name), type, std::move(dims), std::move(bytes)});
  }

  void write(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    if (!out) throw FileError(path, "cannot create");
    auto raw = [&out](const void* p, std::size_t n) { out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); };
    auto u32 = [&](std::uint32_t v) { raw(&v, 4); };
    auto u64 = [&](std::uint64_t v) { raw(&v, 8); };
    auto str = [&](const std::string& s) {
      u64(s.size());
      raw(s.data(), s.size());
    };
    raw("GGUF", 4);
    u32(3);
    u64(tensors_.size());
    u64(kv_.size());
    for (const auto& [key, v] : kv_) {
      str(key);
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::uint32_t>) {
              u32(uint(GgufType::U32));
              raw(&x, 4);
            } else if constexpr (std::is_same_v<T, std::int32_t>) {
              u32(uint(GgufType::I32));
              raw(&x, 4);
            } else if constexpr (std::is_same_v<T, float>) {
              u32(uint(GgufType::F32));
              raw(&x, 4);
            } else if constexpr (std::is_same_v<T, bool>) {
              u32(uint(GgufType::Bool));
              const std::uint8_t b = x;
              raw(&b, 1);
            } else if constexpr (std::is_same_v<T, std::string>) {
              u32(uint(GgufType::String));
              str(x);
            } else if constexpr (std::is_same_v<T, std::uint64_t>) {
              u32(uint(GgufType::U64));
              raw(&x, 8);
            } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              u32(uint(GgufType::Array));
              u32(uint(GgufType::String));
              u64(x.size());
              for (const auto& s : x) str(s);
            } else if constexpr (std::is_same_v<T, std::vector<float>>) {
              u32(uint(GgufType::Array));
              u32(uint(GgufType::F32));
              u64(x.size());
              raw(x.data(), 4 * x.size());
            } else {
              u32(uint(GgufType::Array));
              u32(uint(GgufType::I32));
              u64(x.size());
              raw(x.data(), 4 * x.size());
            }
          },
          v);
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      str(t.name);
      u32(static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) u64(static_cast<std::uint64_t>(d));
      u32(static_cast<std::uint32_t>(t.type));
      u64(offset);
      offset = align(offset + t.bytes.size());
    }
    pad(out);
    for (const auto& t : tensors_) {
      raw(t.bytes.data(), t.bytes.size());
      pad(out);
    }
    if (!out) throw FileError(path, "write failed");
  }

 private:
  static constexpr std::uint64_t kAlign = kGgufDefaultAlignment;
  static std::uint32_t uint(GgufType t) { return static_cast<std::uint32_t>(t); }
  static std::uint64_t align(std::uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
  static void pad(std::ofstream& out) {
    const auto at = static_cast<std::uint64_t>(out.tellp());
    static const char zeros[kAlign] = {};
    out.write(zeros, static_cast<std::streamsize>(align(at) - at));
  }

  struct Tensor {
    std::string name;
    DType type;
    std::vector<std::int64_t> dims;
    std::vector<std::byte> bytes;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace streamllm::io
