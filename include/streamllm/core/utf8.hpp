// UTF-8 validity, as JSON text, SentencePiece and the streaming detokeniser
// need it: no overlong forms, no surrogates, nothing past U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace streamllm {

// Length of a UTF-8 sequence led by byte b, 0 when b cannot lead one.
inline std::size_t utf8_sequence_length(unsigned char b) {
  return b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
}

// The character at s[i]: its code point and length; a byte that does not
// start a valid sequence is a character of its own, `valid` false.
struct Utf8Char {
  char32_t cp;
  std::uint8_t length;
  bool valid;
};
inline Utf8Char utf8_char_at(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const std::size_t n = utf8_sequence_length(c);
  if (n == 0 || i + n > s.size()) return {c, 1, false};
  std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (std::size_t k = 1; k < n; ++k) {
    const auto t = static_cast<unsigned char>(s[i + k]);
    if ((t & 0xC0) != 0x80) return {c, 1, false};
    cp = cp << 6 | (t & 0x3Fu);
  }
  constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return {c, 1, false};
  return {cp, static_cast<std::uint8_t>(n), true};
}

// The offset of the first byte that is not part of valid UTF-8, or npos.
inline std::size_t first_invalid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_char_at(s, i);
    if (!c.valid) return i;
    i += c.length;
  }
  return std::string_view::npos;
}

// Appends to `out` every whole character at the front of `bytes`, each byte
// that cannot be part of one as U+FFFD (as SentencePiece's decode does), and
// returns how many bytes it took. An incomplete sequence at the end waits for
// more bytes, unless `final`.
inline std::size_t append_whole_utf8(std::string& out, std::string_view bytes, bool final) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::size_t need = utf8_sequence_length(static_cast<unsigned char>(bytes[at]));
    std::size_t have = 1;
    while (have < need && at + have < bytes.size() && (static_cast<unsigned char>(bytes[at + have]) & 0xC0) == 0x80) ++have;
    const bool broken = need == 0 || (have < need && at + have < bytes.size());  // a non-trail byte came
    if (need > 0 && have < need && !broken && !final) break;                     // wait for more bytes
    const Utf8Char c = utf8_char_at(bytes.substr(0, at + have), at);
    if (c.valid) {
      out.append(bytes, at, c.length);
      at += c.length;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      at += 1;
    }
  }
  return at;
}

}  // namespace streamllm
