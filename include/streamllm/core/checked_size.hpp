// Sizes computed from a file's fields. A crafted header can make a product
// of its fields wrap around int64 to a small number that passes a size
// check; these sizes say so instead.
#pragma once

#include <cstdint>
#include <optional>

namespace streamllm {

// A non-negative int64 count that remembers whether any step overflowed.
class CheckedSize {
 public:
  constexpr CheckedSize(std::int64_t v = 0)
      : v_(v), ok_(v >= 0) {}  // NOLINT(google-explicit-constructor): counts read as numbers

  constexpr CheckedSize operator*(CheckedSize o) const {
    CheckedSize r;
    r.ok_ = ok_ && o.ok_ && !__builtin_mul_overflow(v_, o.v_, &r.v_);
    return r;
  }
  constexpr CheckedSize operator+(CheckedSize o) const {
    CheckedSize r;
    r.ok_ = ok_ && o.ok_ && !__builtin_add_overflow(v_, o.v_, &r.v_);
    return r;
  }
  constexpr CheckedSize& operator*=(CheckedSize o) { return *this = *this * o; }
  constexpr CheckedSize& operator+=(CheckedSize o) { return *this = *this + o; }

  // The count, or nothing where a step overflowed.
  constexpr std::optional<std::int64_t> value() const { return ok_ ? std::optional<std::int64_t>(v_) : std::nullopt; }

 private:
  std::int64_t v_;
  bool ok_;
};

}  // namespace streamllm
