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

#include "streamllm/core/dtype.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/formats/gguf.hpp"

namespace streamllm::formats {

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
    std::ofstream file(path, std::ios::binary);
    if (!file) throw FileError(path, "cannot create");
    Out out{file};
    out.raw("GGUF", 4);
    out.u32(3);
    out.u64(tensors_.size());
    out.u64(kv_.size());
    for (const auto& [key, v] : kv_) {
      out.str(key);
      std::visit([&](const auto& x) { write_value(out, x); }, v);
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      out.str(t.name);
      out.u32(static_cast<std::uint32_t>(t.dims.size()));
      for (auto d : t.dims) out.u64(static_cast<std::uint64_t>(d));
      out.u32(static_cast<std::uint32_t>(t.type));
      out.u64(offset);
      offset = align(offset + t.bytes.size());
    }
    pad(file);
    for (const auto& t : tensors_) {
      out.raw(t.bytes.data(), t.bytes.size());
      pad(file);
    }
    if (!file) throw FileError(path, "write failed");
  }

 private:
  // Little-endian fields, as GGUF stores them (x86 and ARM Linux are).
  struct Out {
    std::ofstream& file;
    void raw(const void* p, std::size_t n) { file.write(static_cast<const char*>(p), static_cast<std::streamsize>(n)); }
    void u32(std::uint32_t v) { raw(&v, 4); }
    void u64(std::uint64_t v) { raw(&v, 8); }
    void str(const std::string& s) {
      u64(s.size());
      raw(s.data(), s.size());
    }
  };

  // A metadata value: its GGUF type, then its bytes.
  static void write_value(Out& out, std::uint32_t x) { out.u32(uint(GgufType::U32)), out.u32(x); }
  static void write_value(Out& out, std::int32_t x) { out.u32(uint(GgufType::I32)), out.raw(&x, 4); }
  static void write_value(Out& out, float x) { out.u32(uint(GgufType::F32)), out.raw(&x, 4); }
  static void write_value(Out& out, bool x) {
    const std::uint8_t b = x;
    out.u32(uint(GgufType::Bool)), out.raw(&b, 1);
  }
  static void write_value(Out& out, const std::string& x) { out.u32(uint(GgufType::String)), out.str(x); }
  static void write_value(Out& out, std::uint64_t x) { out.u32(uint(GgufType::U64)), out.u64(x); }
  static void write_value(Out& out, const std::vector<std::string>& x) {
    out.u32(uint(GgufType::Array)), out.u32(uint(GgufType::String)), out.u64(x.size());
    for (const auto& s : x) out.str(s);
  }
  template <class T>  // float, std::int32_t
  static void write_value(Out& out, const std::vector<T>& x) {
    out.u32(uint(GgufType::Array)), out.u32(uint(std::is_same_v<T, float> ? GgufType::F32 : GgufType::I32)), out.u64(x.size());
    out.raw(x.data(), 4 * x.size());
  }

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

}  // namespace streamllm::formats
