// A 64-bit hash for fingerprints and checksums: not cryptographic, only a
// check that bytes are the ones written. Eight bytes a step (a multiply and
// a rotate), so a cache file of tens of MB is checked in milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace streamllm {

class Hash64 {
 public:
  Hash64& update(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
      if (fill_ == 0 && n >= 8) {  // whole words
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        mix(w);
        p += 8;
        n -= 8;
        continue;
      }
      buf_[fill_++] = *p++;
      --n;
      if (fill_ == 8) mix_buffer();
    }
    return *this;
  }
  Hash64& update(std::string_view s) { return update(s.data(), s.size()); }
  template <class T>
  Hash64& value(const T& v) {
    return update(&v, sizeof v);
  }

  std::uint64_t digest() const {
    Hash64 h = *this;
    std::uint64_t tail = 0;
    std::memcpy(&tail, h.buf_, h.fill_);
    h.mix(tail ^ (static_cast<std::uint64_t>(h.fill_) << 56));
    std::uint64_t x = h.state_ ^ h.words_;
    x ^= x >> 33;  // splitmix64's finaliser
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  }

 private:
  void mix(std::uint64_t w) {
    state_ = (state_ ^ (w * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    state_ = (state_ << 31) | (state_ >> 33);
    ++words_;
  }
  void mix_buffer() {
    std::uint64_t w;
    std::memcpy(&w, buf_, 8);
    mix(w);
    fill_ = 0;
  }

  std::uint64_t state_ = 0x243f6a8885a308d3ull, words_ = 0;
  unsigned char buf_[8] = {};
  std::size_t fill_ = 0;
};

}  // namespace streamllm
