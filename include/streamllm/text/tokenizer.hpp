// SentencePiece tokenisation (Kudo & Richardson 2018): a thin wrapper that
// encodes with BOS, decodes, and precomputes per-id surfaces so that the
// streaming detokeniser does no string work beyond appending.
#pragma once

#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/formats/gguf.hpp"
#include "streamllm/formats/sentencepiece_model.hpp"

namespace streamllm {

class Tokenizer {
 public:
  enum class Kind : std::uint8_t { Normal, Control, Unknown, Byte };

  // Loads a SentencePiece .model file.
  explicit Tokenizer(const std::string& model_path) : source_(model_path) {
    sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = sp_->Load(model_path);
    if (!st.ok()) throw FileError(model_path, std::string("cannot load SentencePiece model: ") + st.ToString());
    index();
  }

  // Builds from a serialized ModelProto (e.g. one assembled from GGUF metadata).
  static Tokenizer from_serialized(std::string_view proto, std::string source) {
    Tokenizer t;
    t.source_ = std::move(source);
    t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = t.sp_->LoadFromSerializedProto(proto);
    if (!st.ok()) throw FileError(t.source_, std::string("cannot build SentencePiece model: ") + st.ToString());
    t.index();
    return t;
  }

  // The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata: a
  // GGUF file alone is enough.
  static Tokenizer from_gguf(const formats::GgufFile& f) {
    return from_serialized(formats::SentencePieceModel::from_gguf(f).serialize(), f.path());
  }

  // A SentencePiece .model file, or a GGUF file (told by its magic).
  static Tokenizer load(const std::string& path) {
    {
      const formats::MappedFile m(path);
      if (m.size() < 4 || std::memcmp(m.data(), "GGUF", 4) != 0) return Tokenizer(path);
    }
    return from_gguf(formats::GgufFile(path));
  }

  int vocab_size() const { return static_cast<int>(kinds_.size()); }
  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  const std::string& source() const { return source_; }

  // BOS (when asked) followed by the pieces of `text`.
  std::vector<TokenId> encode(std::string_view text, bool add_bos = true) const {
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    if (!st.ok()) throw Error("tokenizer '" + source_ + "': encode failed: " + st.ToString());
    std::vector<TokenId> out;
    out.reserve(ids.size() + 1);
    if (add_bos && bos_ >= 0) out.push_back(bos_);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  // SentencePiece's own decode: the reference the streaming detokeniser matches.
  std::string decode(std::span<const TokenId> ids) const {
    std::vector<int> v(ids.begin(), ids.end());
    for (std::size_t i = 0; i < v.size(); ++i) check_id(v[i], i);
    std::string text;
    const auto st = sp_->Decode(v, &text);
    if (!st.ok()) throw Error("tokenizer '" + source_ + "': decode failed: " + st.ToString());
    return text;
  }

  void check_id(TokenId id, std::size_t index = 0) const {
    if (id < 0 || id >= vocab_size())
      throw InputError("token id " + std::to_string(id) + " at index " + std::to_string(index) + " is out of range [0, " +
                       std::to_string(vocab_size()) + ") of tokenizer '" + source_ + "'");
  }

  // Per-id facts the streaming detokeniser reads.
  Kind kind(TokenId id) const { return kinds_[static_cast<std::size_t>(id)]; }
  // The piece with U+2581 turned into spaces (or the unknown surface).
  const std::string& surface(TokenId id) const { return surfaces_[static_cast<std::size_t>(id)]; }
  bool starts_with_space_symbol(TokenId id) const { return leading_space_[static_cast<std::size_t>(id)] != 0; }
  unsigned char byte_value(TokenId id) const { return bytes_[static_cast<std::size_t>(id)]; }
  const std::string& piece(TokenId id) const { return sp_->IdToPiece(id); }
  // Decode drops the leading U+2581 of the first piece of a text (add_dummy_prefix).
  bool strips_first_space() const { return strip_first_space_; }
  // ... and, with remove_extra_whitespaces, keeps doing so while the text is still empty.
  bool strips_while_empty() const { return strip_while_empty_; }

 private:
  Tokenizer() = default;

  static constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581

  void index() {
    const int n = sp_->GetPieceSize();
    if (n <= 0) throw FileError(source_, "SentencePiece model has no pieces");
    bos_ = sp_->bos_id();
    eos_ = sp_->eos_id();
    kinds_.resize(static_cast<std::size_t>(n));
    surfaces_.resize(static_cast<std::size_t>(n));
    leading_space_.resize(static_cast<std::size_t>(n));
    bytes_.resize(static_cast<std::size_t>(n));
    TokenId spaced = -1, all_space = -1;
    for (int id = 0; id < n; ++id) {
      const auto i = static_cast<std::size_t>(id);
      const std::string& p = sp_->IdToPiece(id);
      if (sp_->IsControl(id)) {
        kinds_[i] = Kind::Control;
      } else if (sp_->IsUnknown(id)) {
        kinds_[i] = Kind::Unknown;
        surfaces_[i] = sp_->DecodeIds({id});  // the model's unk surface, whatever it is
      } else if (sp_->IsByte(id)) {
        kinds_[i] = Kind::Byte;
        bytes_[i] = static_cast<unsigned char>(std::stoi(p.substr(3, 2), nullptr, 16));  // "<0xNN>"
      } else {
        kinds_[i] = Kind::Normal;
        std::string s;
        for (std::size_t at = 0; at < p.size();) {
          if (p.compare(at, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
            s += ' ';
            at += kSpaceSymbol.size();
          } else {
            s += p[at++];
          }
        }
        leading_space_[i] = p.rfind(kSpaceSymbol, 0) == 0;
        surfaces_[i] = std::move(s);
        const bool only_spaces = surfaces_[i].find_first_not_of(' ') == std::string::npos;
        if (leading_space_[i] && only_spaces && all_space < 0) all_space = id;
        if (leading_space_[i] && !only_spaces && spaced < 0) spaced = id;
      }
    }
    // The normalizer flags are not exposed by the C++ API; ask decode itself.
    if (spaced >= 0) strip_first_space_ = sp_->DecodeIds({spaced}) != surfaces_[static_cast<std::size_t>(spaced)];
    if (spaced >= 0 && all_space >= 0 && strip_first_space_)
      strip_while_empty_ = sp_->DecodeIds({all_space, spaced}) == surfaces_[static_cast<std::size_t>(spaced)].substr(1);
  }

  std::string source_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  TokenId bos_ = -1, eos_ = -1;
  std::vector<Kind> kinds_;
  std::vector<std::string> surfaces_;
  std::vector<std::uint8_t> leading_space_;
  std::vector<unsigned char> bytes_;
  bool strip_first_space_ = true;
  bool strip_while_empty_ = false;
};

}  // namespace streamllm
