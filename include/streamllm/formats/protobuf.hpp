// Just enough of the protobuf wire format to write and read SentencePiece's
// ModelProto, whose C++ headers Debian does not ship.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "streamllm/core/error.hpp"

namespace streamllm::formats {

class ProtoWriter {
 public:
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out_ += static_cast<char>(v | 0x80);
      v >>= 7;
    }
    out_ += static_cast<char>(v);
  }
  void integer(int field, std::int64_t v) {  // int32/int64/enum/bool: negative ints take 10 bytes
    tag(field, 0);
    varint(static_cast<std::uint64_t>(v));
  }
  void real(int field, float v) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    out_.append(b, 4);
  }
  void bytes(int field, std::string_view s) {
    tag(field, 2);
    varint(s.size());
    out_.append(s);
  }
  void message(int field, const ProtoWriter& m) { bytes(field, m.out_); }
  const std::string& str() const { return out_; }

 private:
  void tag(int field, int wire) { varint(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire)); }
  std::string out_;
};

// Walks the fields of one message. `what` names the data in errors.
class ProtoReader {
 public:
  ProtoReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  struct Field {
    int number = 0;
    int wire = 0;
    std::uint64_t value = 0;  // varint and fixed32/64 (raw bits)
    std::string_view bytes;   // length-delimited
  };

  bool next(Field& f) {
    if (at_ >= data_.size()) return false;
    const std::uint64_t key = varint();
    f.number = static_cast<int>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    switch (f.wire) {
      case 0: f.value = varint(); break;
      case 1: f.value = fixed(8); break;
      case 5: f.value = fixed(4); break;
      case 2: {
        const std::uint64_t len = varint();
        if (len > data_.size() - at_) fail("a field is longer than its message");
        f.bytes = data_.substr(at_, static_cast<std::size_t>(len));
        at_ += static_cast<std::size_t>(len);
        break;
      }
      default: fail("unsupported protobuf wire type " + std::to_string(f.wire));
    }
    return true;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw FileError(what_, "corrupt protobuf: " + problem); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= data_.size()) fail("truncated varint");
      const auto b = static_cast<unsigned char>(data_[at_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (b < 0x80) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::uint64_t fixed(std::size_t n) {
    if (n > data_.size() - at_) fail("truncated fixed-size field");
    std::uint64_t v = 0;
    std::memcpy(&v, data_.data() + at_, n);
    at_ += n;
    return v;
  }
  std::string_view data_;
  std::string what_;
  std::size_t at_ = 0;
};

}  // namespace streamllm::formats
