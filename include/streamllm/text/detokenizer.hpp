// The streaming detokeniser: turns each new token id into the text it adds,
// as soon as that text is valid UTF-8.
//
// It follows the tokenizer's decode exactly, so that the pieces it hands out
// concatenate to decode(all ids). SentencePiece's:
//  - control tokens (BOS, EOS) add nothing; the unknown token adds its surface;
//  - U+2581 becomes a space, and the first piece of the text loses its
//    leading one (add_dummy_prefix);
//  - byte pieces <0xNN> are bytes; a UTF-8 sequence split over several of
//    them is held back until complete. A byte that cannot start or continue a
//    valid sequence becomes U+FFFD, as decode does.
// A byte-level BPE tokenizer's pieces are all bytes: they go through the
// same hold-back, and control tokens add nothing.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "streamllm/core/utf8.hpp"
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
    } else if (tok_->byte_level()) {  // BPE: every piece is bytes, and a character may span pieces
      if (tok_->kind(id) != Tokenizer::Kind::Control) pending_ += tok_->surface(id);
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

  // Emits every complete character at the front of pending_; with `final`,
  // an incomplete tail is invalid too.
  void drain(bool final) { pending_.erase(0, append_whole_utf8(out_, pending_, final)); }

  const Tokenizer* tok_;
  std::string out_, pending_;
  bool is_bos_ws_ = true;     // the next piece may lose its leading space
  bool bos_ws_seen_ = false;  // the last piece did
  bool text_empty_ = true;
};

}  // namespace streamllm
