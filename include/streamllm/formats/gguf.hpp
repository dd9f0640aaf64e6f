// GGUF reader (versions 2 and 3): header, metadata of every value type,
// tensor infos and the aligned data section, over a memory mapping. Every
// length and offset is checked against the file before it is used: a corrupt
// or hostile file gives a FileError naming what was wrong and where, never a
// read outside the mapping.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

#include "streamllm/core/dtype.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/formats/mapped_file.hpp"

namespace streamllm::formats {

enum class GgufType : std::uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

inline const char* to_string(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<std::uint32_t>(t);
  return i < 13 ? names[i] : "?";
}

// Bytes of one scalar of a fixed-size type (0 for string and array).
inline std::size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    default: return 0;
  }
}

struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars: integers widened into `integer` (and `uinteger`), floats into `real`.
  std::int64_t integer = 0;
  std::uint64_t uinteger = 0;
  double real = 0;
  std::string_view string;  // points into the mapping
  // Arrays: element type and count; fixed-size elements stay in the file
  // (`raw`), strings are views.
  GgufType elem = GgufType::U8;
  std::uint64_t count = 0;
  const std::byte* raw = nullptr;
  std::vector<std::string_view> strings;

  bool is_integer() const { return gguf_scalar_size(type) > 0 && type != GgufType::F32 && type != GgufType::F64; }
  bool is_real() const { return type == GgufType::F32 || type == GgufType::F64; }

  // Element i of a fixed-size numeric array, widened.
  double number_at(std::uint64_t i) const {
    const std::byte* p = raw + i * gguf_scalar_size(elem);
    auto get = [p]<class T>(T) {
      T v;
      std::memcpy(&v, p, sizeof v);
      return v;
    };
    switch (elem) {
      case GgufType::U8: return get(std::uint8_t{});
      case GgufType::I8: return get(std::int8_t{});
      case GgufType::U16: return get(std::uint16_t{});
      case GgufType::I16: return get(std::int16_t{});
      case GgufType::U32: return get(std::uint32_t{});
      case GgufType::I32: return get(std::int32_t{});
      case GgufType::F32: return get(float{});
      case GgufType::Bool: return get(std::uint8_t{});
      case GgufType::U64: return static_cast<double>(get(std::uint64_t{}));
      case GgufType::I64: return static_cast<double>(get(std::int64_t{}));
      case GgufType::F64: return get(double{});
      default: return 0;
    }
  }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;  // ne0 (contiguous) first
  DType type = DType::F32;
  std::uint64_t offset = 0;  // from the start of the data section
  const std::byte* data = nullptr;
  std::uint64_t bytes = 0;

  std::int64_t rows() const {  // product of all dims but ne0
    std::int64_t r = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) r *= dims[i];
    return r;
  }
};

inline constexpr std::uint32_t kGgufDefaultAlignment = 32;

class GgufFile {
 public:
  explicit GgufFile(const std::string& path, LoadMode mode = LoadMode::Mapped) : file_(map_file(path, mode)) { parse(); }
  // Parses a buffer held by the caller (fuzzing, tests); `name` is used in messages.
  GgufFile(const std::byte* data, std::size_t size, std::string name) : name_(std::move(name)), data_(data), size_(size) {
    parse();
  }

  const std::string& path() const { return file_ ? file_->path() : name_; }
  std::uint32_t version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  std::shared_ptr<const MappedFile> mapping() const { return file_; }

  const GgufValue* find(std::string_view key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }
  const GgufTensorInfo* tensor(std::string_view name) const {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }

  // Typed reads of metadata, with errors naming the key.
  std::optional<std::int64_t> integer(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer()) fail("metadata '" + std::string(key) + "' is " + to_string(v->type) + ", an integer was expected");
    return v->integer;
  }
  std::optional<double> real(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_real() && !v->is_integer())
      fail("metadata '" + std::string(key) + "' is " + to_string(v->type) + ", a number was expected");
    return v->is_real() ? v->real : static_cast<double>(v->integer);
  }
  std::optional<std::string_view> string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufType::String)
      fail("metadata '" + std::string(key) + "' is " + to_string(v->type) + ", a string was expected");
    return v->string;
  }
  std::int64_t required_integer(std::string_view key) const {
    auto v = integer(key);
    if (!v) fail("metadata '" + std::string(key) + "' is missing");
    return *v;
  }

  [[noreturn]] void fail(const std::string& problem) const { throw FileError(path(), problem); }

 private:
  // A bounds-checked reader over the header.
  struct Cursor {
    const GgufFile& f;
    std::size_t at = 0;
    std::size_t left() const { return f.size_ - at; }
    void need(std::uint64_t n, const std::string& what) const {
      if (n > left())
        f.fail("truncated: " + what + " at byte " + std::to_string(at) + " needs " + std::to_string(n) + " bytes, the file has " +
               std::to_string(left()) + " left");
    }
    template <class T>
    T read(const std::string& what) {
      need(sizeof(T), what);
      T v;
      std::memcpy(&v, f.data_ + at, sizeof v);
      at += sizeof v;
      return v;
    }
    std::string_view string(const std::string& what) {
      const auto len = read<std::uint64_t>(what + " length");
      if (len > left())
        f.fail("string length " + std::to_string(len) + " of " + what + " at byte " + std::to_string(at - 8) +
               " is larger than the rest of the file (" + std::to_string(left()) + " bytes)");
      std::string_view s(reinterpret_cast<const char*>(f.data_ + at), static_cast<std::size_t>(len));
      at += static_cast<std::size_t>(len);
      return s;
    }
  };

  void parse() {
    if (file_) {
      data_ = file_->data();
      size_ = file_->size();
    }
    Cursor c{*this};
    c.need(4, "magic");
    if (std::memcmp(data_, "GGUF", 4) != 0) {
      std::string magic;
      for (int i = 0; i < 4; ++i) {
        const auto ch = static_cast<unsigned char>(data_[i]);
        magic += ch >= 32 && ch < 127 ? static_cast<char>(ch) : '?';
      }
      fail("not a GGUF file: the magic is '" + magic + "', not 'GGUF'");
    }
    c.at = 4;
    version_ = c.read<std::uint32_t>("version");
    if (version_ != 2 && version_ != 3)
      fail("unknown GGUF version " + std::to_string(version_) + " (versions 2 and 3 are supported)");
    const auto n_tensors = c.read<std::uint64_t>("tensor count");
    const auto n_kv = c.read<std::uint64_t>("metadata count");
    // Smallest possible entries: a key-value is 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
    auto count_check = [&](std::uint64_t n, std::uint64_t min_bytes, const char* what) {
      if (n > c.left() / min_bytes)
        fail(std::string("truncated or corrupt header: the ") + what + " " + std::to_string(n) +
             " is larger than the file could hold (" + std::to_string(c.left()) + " bytes left)");
    };
    count_check(n_kv, 13, "metadata count");
    count_check(n_tensors, 32, "tensor count");

    for (std::uint64_t i = 0; i < n_kv; ++i) {
      const std::string key(c.string("metadata key " + std::to_string(i)));
      const auto type = static_cast<GgufType>(c.read<std::uint32_t>("type of '" + key + "'"));
      GgufValue v = value(c, type, key, 0);
      if (!kv_.emplace(key, std::move(v)).second) fail("metadata key '" + key + "' appears twice");
    }

    if (const GgufValue* a = find("general.alignment")) {
      if (a->type != GgufType::U32 || a->uinteger == 0 || (a->uinteger & (a->uinteger - 1)) != 0)
        fail("general.alignment must be a power of two (u32), not " + std::to_string(a->uinteger));
      alignment_ = static_cast<std::uint32_t>(a->uinteger);
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) tensors_.push_back(tensor_info(c, i));
    data_offset_ = (c.at + alignment_ - 1) / alignment_ * alignment_;

    for (auto& t : tensors_) {
      const std::uint64_t start = data_offset_ + t.offset;
      if (t.offset > size_ || start > size_ || t.bytes > size_ - start)
        fail("tensor '" + t.name + "' data [" + std::to_string(start) + ", +" + std::to_string(t.bytes) +
             ") lies outside the file (" + std::to_string(size_) + " bytes)");
      t.data = data_ + start;
    }
  }

  // An integer of type T, kept both signed and unsigned (as the file's bits).
  template <class T>
  static void read_integer(Cursor& c, const std::string& what, GgufValue& v) {
    const T x = c.read<T>(what);
    if constexpr (std::is_signed_v<T>) {
      v.integer = x;
      v.uinteger = static_cast<std::uint64_t>(v.integer);
    } else {
      v.uinteger = x;
      v.integer = static_cast<std::int64_t>(v.uinteger);
    }
  }

  GgufValue value(Cursor& c, GgufType type, const std::string& key, int depth) {
    GgufValue v;
    v.type = type;
    const std::string what = "value of '" + key + "'";
    switch (type) {
      case GgufType::U8: read_integer<std::uint8_t>(c, what, v); break;
      case GgufType::I8: read_integer<std::int8_t>(c, what, v); break;
      case GgufType::U16: read_integer<std::uint16_t>(c, what, v); break;
      case GgufType::I16: read_integer<std::int16_t>(c, what, v); break;
      case GgufType::U32: read_integer<std::uint32_t>(c, what, v); break;
      case GgufType::I32: read_integer<std::int32_t>(c, what, v); break;
      case GgufType::U64: read_integer<std::uint64_t>(c, what, v); break;
      case GgufType::I64: read_integer<std::int64_t>(c, what, v); break;
      case GgufType::Bool:
        v.uinteger = c.read<std::uint8_t>(what) != 0;
        v.integer = static_cast<std::int64_t>(v.uinteger);
        break;
      case GgufType::F32: v.real = c.read<float>(what); break;
      case GgufType::F64: v.real = c.read<double>(what); break;
      case GgufType::String: v.string = c.string(what); break;
      case GgufType::Array: array(c, key, depth, v); break;
      default: fail("metadata '" + key + "' has unknown value type " + std::to_string(static_cast<std::uint32_t>(type)));
    }
    return v;
  }

  // An array's element type, length and elements: scalars as a view of the
  // file, strings copied, nested arrays validated and dropped.
  void array(Cursor& c, const std::string& key, int depth, GgufValue& v) {
    if (depth > 3) fail("metadata '" + key + "' nests arrays more than 4 deep");
    v.elem = static_cast<GgufType>(c.read<std::uint32_t>("element type of '" + key + "'"));
    v.count = c.read<std::uint64_t>("array length of '" + key + "'");
    const std::size_t elem_size = gguf_scalar_size(v.elem);
    const std::uint64_t min_elem = elem_size ? elem_size : (v.elem == GgufType::String ? 8 : 12);
    if (v.count > c.left() / min_elem)
      fail("array length " + std::to_string(v.count) + " of '" + key + "' is larger than the rest of the file (" +
           std::to_string(c.left()) + " bytes)");
    if (elem_size) {
      v.raw = data_ + c.at;
      c.at += static_cast<std::size_t>(v.count * elem_size);
    } else if (v.elem == GgufType::String) {
      v.strings.reserve(static_cast<std::size_t>(v.count));
      for (std::uint64_t i = 0; i < v.count; ++i)
        v.strings.push_back(c.string("element " + std::to_string(i) + " of '" + key + "'"));
    } else if (v.elem == GgufType::Array) {
      for (std::uint64_t i = 0; i < v.count; ++i) {
        const auto t = static_cast<GgufType>(c.read<std::uint32_t>("type in '" + key + "'"));
        if (t != GgufType::Array) fail("metadata '" + key + "': a nested array holds a non-array");
        value(c, t, key, depth + 1);  // validated, not kept: no Llama key uses them
      }
    } else {
      fail("metadata '" + key + "' is an array of unknown type " + std::to_string(static_cast<std::uint32_t>(v.elem)));
    }
  }

  GgufTensorInfo tensor_info(Cursor& c, std::uint64_t index) {
    GgufTensorInfo t;
    const std::string_view name = c.string("name of tensor " + std::to_string(index));
    t.name = std::string(name);
    if (!names_.insert(name).second) fail("tensor '" + t.name + "' appears twice");
    const auto n_dims = c.read<std::uint32_t>("dimension count of '" + t.name + "'");
    if (n_dims == 0 || n_dims > 4)
      fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4 are allowed)");
    std::uint64_t elems = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto n = c.read<std::uint64_t>("dimension of '" + t.name + "'");
      if (n == 0 || n > (std::uint64_t(1) << 40) || elems > (std::uint64_t(1) << 50) / n)
        fail("tensor '" + t.name + "' has an impossible dimension " + std::to_string(n));
      elems *= n;
      t.dims.push_back(static_cast<std::int64_t>(n));
    }
    const auto type = c.read<std::uint32_t>("type of '" + t.name + "'");
    if (!is_known_dtype(type))
      fail("tensor '" + t.name + "' holds " + ggml_type_label(type) + ", which streamllm does not read (" + file_type_names() +
           " are supported)");
    t.type = static_cast<DType>(type);
    const auto block = traits(t.type).block_elems;
    if (t.dims[0] % block != 0)
      fail("tensor '" + t.name + "' has rows of " + std::to_string(t.dims[0]) + " elements, not a multiple of the " +
           std::string(dtype_name(t.type)) + " block (" + std::to_string(block) + ")");
    t.bytes = static_cast<std::uint64_t>(row_bytes(t.type, t.dims[0])) * static_cast<std::uint64_t>(t.rows());
    t.offset = c.read<std::uint64_t>("data offset of '" + t.name + "'");
    if (t.offset % alignment_ != 0)
      fail("tensor '" + t.name + "' data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment_));
    return t;
  }

  std::shared_ptr<const MappedFile> file_;
  std::string name_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = kGgufDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::set<std::string_view> names_;  // views into the mapping
};

}  // namespace streamllm::formats
