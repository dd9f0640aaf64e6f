// Byte-level BPE's pre-tokenisers: the regex a vocabulary was trained with
// cuts text into words, and BPE merges only inside a word. GGUF names the
// regex in `tokenizer.ggml.pre`. Each is written here as the scan its regex
// performs (leftmost alternative first, greedy, one code point of lookahead),
// which is exact for these patterns and needs no regex engine:
//
//   gpt-2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama-bpe  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   smollm     \p{N} (each digit a word), then gpt-2 within what is left
//
// A byte that is not valid UTF-8 is a character of class "other", so that
// every byte of the text lands in exactly one word.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/core/utf8.hpp"
#include "streamllm/text/unicode_classes.hpp"

namespace streamllm {

namespace unicode {
// The classes of `cp` (kLetter, kNumber, kSpace, or kOther): ASCII by a
// table, the rest by a binary search of the ranges.
inline std::uint8_t classes_of(char32_t cp) {
  static constexpr auto kAscii = [] {
    std::array<std::uint8_t, 128> t{};
    for (const ClassRange& r : kClassRanges)
      for (char32_t c = r.first; c <= r.last && c < 128; ++c) t[c] = r.classes;
    return t;
  }();
  if (cp < 128) return kAscii[cp];
  const auto it =
      std::upper_bound(kClassRanges.begin(), kClassRanges.end(), cp, [](char32_t c, const ClassRange& r) { return c < r.first; });
  if (it == kClassRanges.begin()) return kOther;
  const ClassRange& r = *(it - 1);
  return cp <= r.last ? r.classes : kOther;
}
}  // namespace unicode

enum class PreTokenizer : std::uint8_t { Gpt2, Llama3, SmolLM };

// The pre-tokeniser GGUF's `tokenizer.ggml.pre` names (llama.cpp's names).
inline PreTokenizer pre_tokenizer_named(std::string_view name, const std::string& where) {
  if (name == "gpt-2" || name == "gpt2" || name == "default") return PreTokenizer::Gpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::Llama3;
  if (name == "smollm") return PreTokenizer::SmolLM;
  throw FileError(where, "pre-tokenizer '" + std::string(name) +
                             "' (tokenizer.ggml.pre) is not one streamllm knows: gpt-2, llama-bpe, smollm");
}

class WordSplitter {
 public:
  explicit WordSplitter(PreTokenizer pre) : pre_(pre) {}

  // Appends the words of `text` (views into it) to `words`.
  void split(std::string_view text, std::vector<std::string_view>& words) {
    chars_.clear();
    for (std::size_t at = 0; at < text.size();) {
      const Utf8Char c = utf8_char_at(text, at);
      chars_.push_back({c.valid ? c.cp : 0xFFFD, at, c.valid ? unicode::classes_of(c.cp) : unicode::kOther});
      at += c.length;
    }
    chars_.push_back({0, text.size(), 0});  // the end, for byte offsets
    const std::size_t n = chars_.size() - 1;
    auto emit = [&](std::size_t b, std::size_t e) { words.push_back(text.substr(chars_[b].at, chars_[e].at - chars_[b].at)); };
    if (pre_ != PreTokenizer::SmolLM) {
      for (std::size_t i = 0; i < n;) {
        const std::size_t j = pre_ == PreTokenizer::Llama3 ? llama3_word(i, n) : gpt2_word(i, n);
        emit(i, j);
        i = j;
      }
      return;
    }
    for (std::size_t b = 0; b < n;) {  // each digit alone, gpt-2 between them
      if (is(b, unicode::kNumber)) {
        emit(b, b + 1);
        ++b;
        continue;
      }
      std::size_t e = b;
      while (e < n && !is(e, unicode::kNumber)) ++e;
      for (std::size_t i = b; i < e;) {
        const std::size_t j = gpt2_word(i, e);
        emit(i, j);
        i = j;
      }
      b = e;
    }
  }

 private:
  struct Char {
    char32_t cp;
    std::size_t at;  // byte offset in the text
    std::uint8_t classes;
  };

  bool is(std::size_t i, std::uint8_t cls) const { return (chars_[i].classes & cls) != 0; }
  bool other(std::size_t i) const { return chars_[i].classes == unicode::kOther; }
  bool newline(std::size_t i) const { return chars_[i].cp == '\r' || chars_[i].cp == '\n'; }
  static char32_t lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

  // 's 't 're 've 'm 'll 'd at i: the end, or i.
  std::size_t contraction(std::size_t i, std::size_t e, bool any_case) const {
    if (chars_[i].cp != '\'' || i + 1 >= e) return i;
    auto at = [&](std::size_t k) { return any_case ? lower(chars_[k].cp) : chars_[k].cp; };
    const char32_t a = at(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= e) return i;
    const char32_t b = at(i + 2);
    return (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') ? i + 3 : i;
  }
  // A run of whitespace at i: \s+(?!\S), else \s+ (one character).
  std::size_t spaces(std::size_t i, std::size_t e) const {
    std::size_t r = i;
    while (r < e && is(r, unicode::kSpace)) ++r;
    return r == e || r - i == 1 ? r : r - 1;
  }
  template <class Pred>
  std::size_t run(std::size_t i, std::size_t e, Pred p) const {
    while (i < e && p(i)) ++i;
    return i;
  }

  std::size_t gpt2_word(std::size_t i, std::size_t e) const {
    if (const std::size_t c = contraction(i, e, false); c != i) return c;
    const std::size_t k = chars_[i].cp == ' ' && i + 1 < e ? i + 1 : i;  // " ?"
    if (is(k, unicode::kLetter)) return run(k, e, [&](std::size_t j) { return is(j, unicode::kLetter); });
    if (is(k, unicode::kNumber)) return run(k, e, [&](std::size_t j) { return is(j, unicode::kNumber); });
    if (other(k)) return run(k, e, [&](std::size_t j) { return other(j); });
    return spaces(i, e);
  }

  std::size_t llama3_word(std::size_t i, std::size_t e) const {
    if (const std::size_t c = contraction(i, e, true); c != i) return c;
    auto letters = [&](std::size_t j) { return is(j, unicode::kLetter); };
    if (is(i, unicode::kLetter)) return run(i, e, letters);
    if (!newline(i) && !is(i, unicode::kNumber) && i + 1 < e && is(i + 1, unicode::kLetter)) return run(i + 1, e, letters);
    if (is(i, unicode::kNumber)) return run(i, std::min(e, i + 3), [&](std::size_t j) { return is(j, unicode::kNumber); });
    const std::size_t k = chars_[i].cp == ' ' && i + 1 < e ? i + 1 : i;
    if (other(k)) {
      const std::size_t p = run(k, e, [&](std::size_t j) { return other(j); });
      return run(p, e, [&](std::size_t j) { return newline(j); });
    }
    // \s*[\r\n]+ ends after the run's last newline; else \s+(?!\S), \s+.
    const std::size_t r = run(i, e, [&](std::size_t j) { return is(j, unicode::kSpace); });
    for (std::size_t j = r; j > i; --j)
      if (newline(j - 1)) return j;
    return spaces(i, e);
  }

  PreTokenizer pre_;
  std::vector<Char> chars_;
};

}  // namespace streamllm
