// The tokenizer of a model file, one interface over two kinds: SentencePiece
// (Kudo & Richardson 2018; Llama 2, Mistral, TinyLlama), a thin wrapper over
// the library, and byte-level BPE (GPT-2, Llama 3, SmolLM2; bpe_vocab.hpp).
// It encodes with BOS, parses special tokens out of text when asked, decodes,
// and precomputes per-id surfaces so that the streaming detokeniser does no
// string work beyond appending.
#pragma once

#include <sentencepiece_processor.h>

#include <algorithm>
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
#include "streamllm/text/bpe_vocab.hpp"

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
  // GGUF file alone is enough. `tokenizer.ggml.model` says which kind:
  // "llama" (SentencePiece) or "gpt2" (byte-level BPE).
  static Tokenizer from_gguf(const formats::GgufFile& f) {
    const auto model = f.string("tokenizer.ggml.model");
    Tokenizer t = model && *model == "gpt2" ? from_bpe_gguf(f)
                                            : from_serialized(formats::SentencePieceModel::from_gguf(f).serialize(), f.path());
    if (const auto tmpl = f.string("tokenizer.chat_template")) t.chat_template_ = std::string(*tmpl);
    return t;
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
  // Whether `id` ends a generation: EOS, the file's end-of-turn token
  // (tokenizer.ggml.eot_token_id, eom_token_id) and every token named as one
  // ("<|eot_id|>", "<|im_end|>", ...), as llama.cpp's llama_vocab_is_eog.
  bool ends_generation(TokenId id) const { return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id); }
  const std::vector<TokenId>& end_of_generation_tokens() const { return end_of_generation_; }
  const std::string& source() const { return source_; }
  // The file's chat template (Jinja source, tokenizer.chat_template); empty
  // when the file has none (SentencePiece .model files never do).
  const std::string& chat_template() const { return chat_template_; }
  // Byte-level BPE: every piece is bytes, and a character may span pieces.
  bool byte_level() const { return bpe_ != nullptr; }
  // Whether encode(text, true) starts with BOS: SentencePiece's always do; a
  // BPE file says so in tokenizer.ggml.add_bos_token (Llama 3's do, GPT-2's
  // and SmolLM2's do not).
  bool adds_bos() const { return add_bos_ && bos_ >= 0; }

  // BOS (when asked, and the vocabulary adds one) followed by the tokens of
  // `text`. With `parse_special`, the text of a control token (
  // "<|eot_id|>", "</s>") in `text` is that token, as llama.cpp's
  // parse_special does; otherwise it is plain text. A BPE vocabulary's
  // user-defined tokens are always parsed.
  std::vector<TokenId> encode(std::string_view text, bool add_bos = true, bool parse_special = false) const {
    std::vector<TokenId> out;
    if (add_bos && adds_bos()) out.push_back(bos_);
    for (const Fragment& f : special_fragments(text, parse_special)) {
      if (f.special >= 0)
        out.push_back(f.special);
      else
        encode_plain(text.substr(f.begin, f.end - f.begin), out);
    }
    return out;
  }

  // Text a chat template wrote (bos_token, markers, turns): special tokens
  // parsed, no BOS added. SentencePiece puts a word's leading space into its
  // first piece, and encodes every fragment with such a dummy space; so a
  // fragment's own first space is that dummy space and is not encoded twice.
  // This gives Meta's and Mistral's reference ids, which encode each turn
  // alone: "<s> [INST] hi [/INST]" is <s> "▁[INST]▁hi▁[/INST]".
  std::vector<TokenId> encode_template_text(std::string_view text) const {
    std::vector<TokenId> out;
    for (const Fragment& f : special_fragments(text, true)) {
      if (f.special >= 0) {
        out.push_back(f.special);
        continue;
      }
      std::string_view plain = text.substr(f.begin, f.end - f.begin);
      if (!bpe_ && !plain.empty() && plain.front() == ' ') plain.remove_prefix(1);
      encode_plain(plain, out);
    }
    return out;
  }

  // The text of `ids`: SentencePiece's own decode, or the BPE tokens' bytes
  // with invalid UTF-8 as U+FFFD. The reference the streaming detokeniser
  // matches. Control tokens add nothing, or with `render_special` (BPE) their
  // text, so that decode(encode(x, false, true), true) == x.
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const {
    for (std::size_t i = 0; i < ids.size(); ++i) check_id(ids[i], i);
    std::string text;
    if (bpe_) {
      std::string bytes;
      for (const TokenId id : ids) {
        if (kind(id) != Kind::Control)
          bytes += surface(id);
        else if (render_special)
          bytes += piece(id);
      }
      append_whole_utf8(text, bytes, true);
      return text;
    }
    const std::vector<int> v(ids.begin(), ids.end());
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
  // The piece with U+2581 turned into spaces (or the unknown surface); a BPE
  // token's bytes.
  const std::string& surface(TokenId id) const { return surfaces_[static_cast<std::size_t>(id)]; }
  bool starts_with_space_symbol(TokenId id) const { return leading_space_[static_cast<std::size_t>(id)] != 0; }
  unsigned char byte_value(TokenId id) const { return bytes_[static_cast<std::size_t>(id)]; }
  // The token as the vocabulary writes it ("▁the", "Ġthe", "<|eot_id|>").
  const std::string& piece(TokenId id) const { return pieces_[static_cast<std::size_t>(id)]; }
  // Decode drops the leading U+2581 of the first piece of a text (add_dummy_prefix).
  bool strips_first_space() const { return strip_first_space_; }
  // ... and, with remove_extra_whitespaces, keeps doing so while the text is still empty.
  bool strips_while_empty() const { return strip_while_empty_; }

 private:
  Tokenizer() = default;

  static constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";  // U+2581

  // A BPE vocabulary from GGUF metadata: tokens, merges, token types, the
  // pre-tokenizer's name, BOS / EOS and whether BOS is added.
  static Tokenizer from_bpe_gguf(const formats::GgufFile& f) {
    auto strings = [&](const char* key, bool required) -> const std::vector<std::string_view>* {
      const formats::GgufValue* v = f.find(key);
      if (!v && !required) return nullptr;
      if (!v || v->type != formats::GgufType::Array || v->elem != formats::GgufType::String)
        f.fail(std::string(key) + " is missing or not an array of strings");
      return &v->strings;
    };
    const auto& tokens = *strings("tokenizer.ggml.tokens", true);
    const auto& merges = *strings("tokenizer.ggml.merges", true);
    if (tokens.empty()) f.fail("tokenizer.ggml.tokens is empty");
    const auto pre = f.string("tokenizer.ggml.pre");
    Tokenizer t;
    t.source_ = f.path();
    t.bpe_ = std::make_shared<const BpeVocab>(tokens, merges, pre_tokenizer_named(pre.value_or("gpt-2"), f.path()), f.path());
    const std::size_t n = tokens.size();
    const formats::GgufValue* types = f.find("tokenizer.ggml.token_type");
    if (types && (types->type != formats::GgufType::Array || types->count != n || formats::gguf_scalar_size(types->elem) == 0))
      f.fail("tokenizer.ggml.token_type does not hold one number per token");
    t.kinds_.assign(n, Kind::Normal);
    t.surfaces_.resize(n);
    t.pieces_.resize(n);
    t.leading_space_.assign(n, 0);
    t.bytes_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const double type = types ? types->number_at(i) : 1;
      if (!(type >= 0 && type <= 6) || type != static_cast<int>(type))
        f.fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] is not a token type (0-6)");
      // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (0: undefined, normal).
      const int k = static_cast<int>(type);
      t.kinds_[i] = k == 2 ? Kind::Unknown : k == 3 || k == 5 ? Kind::Control : Kind::Normal;
      t.pieces_[i] = std::string(tokens[i]);
      t.surfaces_[i] = k == 4 ? t.pieces_[i] : t.bpe_->bytes(static_cast<TokenId>(i));
      if (k == 2 || k == 3 || k == 4) t.specials_.push_back(static_cast<TokenId>(i));
    }
    auto id = [&](const char* key) -> TokenId {
      const auto v = f.integer(key);
      if (!v) return -1;
      if (*v < 0 || static_cast<std::uint64_t>(*v) >= n)
        f.fail(std::string(key) + " is " + std::to_string(*v) + ", not a token of the " + std::to_string(n) +
               "-token vocabulary");
      return static_cast<TokenId>(*v);
    };
    t.bos_ = id("tokenizer.ggml.bos_token_id");
    t.eos_ = id("tokenizer.ggml.eos_token_id");
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
      if (const TokenId e = id(key); e >= 0) t.end_of_generation_.push_back(e);
    const formats::GgufValue* add_bos = f.find("tokenizer.ggml.add_bos_token");
    t.add_bos_ = add_bos && add_bos->type == formats::GgufType::Bool ? add_bos->integer != 0 : false;
    t.find_turn_ends();
    t.sort_specials();
    return t;
  }

  // The tokens that end a turn in the chat formats, by name, as llama.cpp
  // finds them (and, as there, they are control tokens whatever the file says).
  void find_turn_ends() {
    static constexpr std::string_view kTurnEnds[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                     "<|endoftext|>", "<|eom_id|>", "<EOT>"};
    if (eos_ >= 0) end_of_generation_.push_back(eos_);
    for (std::size_t i = 0; i < pieces_.size(); ++i)
      if (std::find(std::begin(kTurnEnds), std::end(kTurnEnds), pieces_[i]) != std::end(kTurnEnds)) {
        end_of_generation_.push_back(static_cast<TokenId>(i));
        kinds_[i] = Kind::Control;
      }
    std::sort(end_of_generation_.begin(), end_of_generation_.end());
    end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()), end_of_generation_.end());
  }

  // Longest first: each special token cuts the text left between longer
  // ones, as llama.cpp's tokenizer partitions it.
  void sort_specials() {
    std::stable_sort(specials_.begin(), specials_.end(), [&](TokenId a, TokenId b) { return piece(a).size() > piece(b).size(); });
  }

  struct Fragment {
    std::size_t begin, end;
    TokenId special;  // -1: plain text
  };
  std::vector<Fragment> special_fragments(std::string_view text, bool parse_special) const {
    std::vector<Fragment> cut{{0, text.size(), -1}}, next;
    for (const TokenId id : specials_) {
      if (!parse_special && kind(id) != Kind::Normal) continue;  // only user-defined tokens are always parsed
      const std::string& p = piece(id);
      if (p.empty()) continue;
      next.clear();
      for (const Fragment& f : cut) {
        std::size_t at = f.begin;
        for (std::size_t w; f.special < 0 && (w = text.substr(0, f.end).find(p, at)) != std::string_view::npos;) {
          if (w > at) next.push_back({at, w, -1});
          next.push_back({w, w + p.size(), id});
          at = w + p.size();
        }
        if (f.special >= 0)
          next.push_back(f);
        else if (at < f.end)
          next.push_back({at, f.end, -1});
      }
      cut.swap(next);
    }
    return cut;
  }

  void encode_plain(std::string_view text, std::vector<TokenId>& out) const {
    if (text.empty()) return;
    if (bpe_) return bpe_->encode(text, out);
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    if (!st.ok()) throw Error("tokenizer '" + source_ + "': encode failed: " + st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  void index() {
    const int n = sp_->GetPieceSize();
    if (n <= 0) throw FileError(source_, "SentencePiece model has no pieces");
    bos_ = sp_->bos_id();
    eos_ = sp_->eos_id();
    kinds_.resize(static_cast<std::size_t>(n));
    pieces_.resize(static_cast<std::size_t>(n));
    surfaces_.resize(static_cast<std::size_t>(n));
    leading_space_.resize(static_cast<std::size_t>(n));
    bytes_.resize(static_cast<std::size_t>(n));
    TokenId spaced = -1, all_space = -1;
    for (int id = 0; id < n; ++id) {
      const auto i = static_cast<std::size_t>(id);
      const std::string& p = sp_->IdToPiece(id);
      pieces_[i] = p;
      if (sp_->IsControl(id) || sp_->IsUnknown(id)) specials_.push_back(id);
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
    find_turn_ends();
    sort_specials();
  }

  std::string source_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::shared_ptr<const BpeVocab> bpe_;
  TokenId bos_ = -1, eos_ = -1;
  bool add_bos_ = true;
  std::string chat_template_;
  std::vector<Kind> kinds_;
  std::vector<std::string> pieces_;
  std::vector<std::string> surfaces_;
  // Tokens cut out of text before encoding, longest first: control and
  // unknown ones when asked, BPE's user-defined (added) ones always.
  std::vector<TokenId> specials_;
  std::vector<TokenId> end_of_generation_;  // sorted, EOS among them
  std::vector<std::uint8_t> leading_space_;
  std::vector<unsigned char> bytes_;
  bool strip_first_space_ = true;
  bool strip_while_empty_ = false;
};

}  // namespace streamllm
