// The streaming detokeniser: turns each new token id into the text it adds,
// as soon as that text is valid UTF-8.
//
// It follows SentencePiece's decode exactly, so that the pieces it hands out
// concatenate to decode(all ids):
//  - control tokens (BOS, EOS) add nothing; the unknown token adds its surface;
//  - U+2581 becomes a space, and the first piece of the text loses its
//    leading one (add_dummy_prefix);
//  - byte pieces <0xNN> are bytes; a UTF-8 sequence split over several of
//    them is held back until complete. A byte that cannot start or continue a
//    valid sequence becomes U+FFFD, as decode does.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok) : tok_(&tok) {}

  // The text token `id` completes; empty while bytes are held back. The view
  // is valid until the next call.
  std::string_view push(TokenId id) {
    tok_->check_id(id);
    out_.clear();
    if (tok_->kind(id) == Tokenizer::Kind::Byte) {
      pending_ += static_cast<char>(tok_->byte_value(id));
      drain(false);
    } else {
      drain(true);  // a byte run ends here: what is left of it is invalid
      if (bos_ws_seen_ || !(text_empty_ && out_.empty())) is_bos_ws_ = false;
      append_piece(id);
    }
    text_empty_ = text_empty_ && out_.empty();
    return out_;
  }

  // End of stream: bytes still held back become U+FFFD, as in decode.
  std::string_view finish() {
    out_.clear();
    drain(true);
    text_empty_ = text_empty_ && out_.empty();
    return out_;
  }

  // Bytes held back, waiting for the rest of a UTF-8 sequence.
  std::size_t held_bytes() const { return pending_.size(); }

  void reset() {
    out_.clear();
    pending_.clear();
    is_bos_ws_ = true;
    bos_ws_seen_ = false;
    text_empty_ = true;
  }

 private:
  static constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

  void append_piece(TokenId id) {
    bos_ws_seen_ = false;
    switch (tok_->kind(id)) {
      case Tokenizer::Kind::Control: return;
      case Tokenizer::Kind::Unknown: out_ += tok_->surface(id); return;
      default: break;
    }
    const std::string& s = tok_->surface(id);
    if (is_bos_ws_ && tok_->strips_first_space() && tok_->starts_with_space_symbol(id)) {
      out_.append(s, 1, std::string::npos);
      bos_ws_seen_ = !tok_->strips_while_empty();
    } else {
      out_ += s;
    }
  }

  // Length of a UTF-8 sequence led by b, 0 when b cannot lead one.
  static std::size_t sequence_length(unsigned char b) {
    if (b < 0x80) return 1;
    if ((b & 0xE0) == 0xC0) return 2;
    if ((b & 0xF0) == 0xE0) return 3;
    if ((b & 0xF8) == 0xF0) return 4;
    return 0;
  }
  static bool is_trail(unsigned char b) { return (b & 0xC0) == 0x80; }

  // SentencePiece's validity rule for a complete sequence (no overlongs, no
  // surrogates, nothing past U+10FFFF).
  static bool valid_sequence(const unsigned char* s, std::size_t len) {
    std::uint32_t cp = 0;
    switch (len) {
      case 1: return true;
      case 2: cp = (s[0] & 0x1Fu) << 6 | (s[1] & 0x3Fu); return cp >= 0x80;
      case 3: cp = (s[0] & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu); break;
      case 4: cp = (s[0] & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu); break;
      default: return false;
    }
    const bool codepoint = cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF);
    return codepoint && cp >= (len == 3 ? 0x800u : 0x10000u);
  }

  // Emits every complete character at the front of pending_; with `final`,
  // an incomplete tail is invalid too.
  void drain(bool final) {
    std::size_t at = 0;
    const auto* b = reinterpret_cast<const unsigned char*>(pending_.data());
    while (at < pending_.size()) {
      const std::size_t need = sequence_length(b[at]);
      std::size_t have = 1;
      while (have < need && at + have < pending_.size() && is_trail(b[at + have])) ++have;
      const bool complete = need > 0 && have == need;
      const bool broken = need == 0 || (have < need && at + have < pending_.size());  // a non-trail byte came
      if (!complete && !broken && !final) break;                                      // wait for more bytes
      if (complete && valid_sequence(b + at, need)) {
        out_.append(pending_, at, need);
        at += need;
      } else {
        out_ += kReplacement;
        at += 1;
      }
    }
    pending_.erase(0, at);
  }

  const Tokenizer* tok_;
  std::string out_, pending_;
  bool is_bos_ws_ = true;     // the next piece may lose its leading space
  bool bos_ws_seen_ = false;  // the last piece did
  bool text_empty_ = true;
};

}  // namespace streamllm
