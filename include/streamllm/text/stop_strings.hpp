// Stop strings, as OpenAI's `stop`: generation ends where the text first
// contains one of them, and none of it reaches the caller. Text arrives in
// pieces, so a stop string may be split over several: a piece's tail that
// could still begin one is held back until the next piece decides, and only
// for as long as it may still match.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/core/error.hpp"

namespace streamllm {

class StopStrings {
 public:
  static constexpr std::size_t kMaxStrings = 4;  // OpenAI's limit

  StopStrings() = default;
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
    if (stops_.size() > kMaxStrings)
      throw InputError("stop strings: " + std::to_string(stops_.size()) + " given, at most " + std::to_string(kMaxStrings));
    for (const auto& s : stops_)
      if (s.empty()) throw InputError("stop strings: an empty stop string would stop at once");
  }

  bool empty() const { return stops_.empty(); }

  // Appends a piece of text; returns the text that is now final (valid until
  // the next call). When a stop string is complete, matched() becomes true
  // and the text returned ends where the match begins.
  std::string_view push(std::string_view piece) {
    held_ += piece;
    if (matched_) return {};
    // The earliest complete occurrence of any stop string.
    std::size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
      matched_ = true;
      return release(first);
    }
    // Keep the longest tail that is a proper prefix of some stop string.
    std::size_t keep = 0;
    for (const auto& s : stops_)
      for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
        if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
    return release(held_.size() - keep);
  }

  // End of text: whatever is held can no longer become a stop string.
  std::string_view flush() { return matched_ ? std::string_view() : release(held_.size()); }

  bool matched() const { return matched_; }
  std::size_t held_bytes() const { return held_.size(); }

 private:
  std::string_view release(std::size_t n) {
    released_.assign(held_, 0, n);
    held_.erase(0, matched_ ? held_.size() : n);
    return released_;
  }

  std::vector<std::string> stops_;
  std::string held_, released_;
  bool matched_ = false;
};

}  // namespace streamllm
