// Byte-level BPE (GPT-2's, Llama 3's, SmolLM2's): a vocabulary of byte
// strings, written with one printable character per byte, and a ranked list
// of merges. Encoding cuts text into words (pretokenizer.hpp), starts each
// word as its bytes' tokens and merges the adjacent pair of lowest rank, the
// leftmost among equals, until no pair merges: what Hugging Face's and
// llama.cpp's BPE do. Pairs and merges are token ids, so a merge is one hash
// lookup and no string is built while merging. Llama 3's vocabulary first
// takes a word that is a token whole (ignore_merges, as Hugging Face's and
// llama.cpp's do for it).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/core/utf8.hpp"
#include "streamllm/text/pretokenizer.hpp"

namespace streamllm {

class BpeVocab {
 public:
  // `tokens` as the file writes them (bytes as GPT-2's printable characters),
  // `merges` as "left right".
  BpeVocab(const std::vector<std::string_view>& tokens, const std::vector<std::string_view>& merges, PreTokenizer pre,
           const std::string& source)
      : pre_(pre), ignore_merges_(pre == PreTokenizer::Llama3) {
    const auto chars = byte_chars();
    std::array<int, 0x144> byte_of_char;  // the printable characters are below U+0144
    byte_of_char.fill(-1);
    for (int b = 0; b < 256; ++b) byte_of_char[chars[static_cast<std::size_t>(b)]] = b;

    ids_.reserve(tokens.size());
    bytes_.resize(tokens.size());
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      ids_.emplace(std::string(tokens[id]), static_cast<TokenId>(id));
      // The token's bytes; a token not written in byte characters (a
      // control token's "<|eot_id|>" is, a user's added token may not be)
      // stands for its text.
      std::string& out = bytes_[id];
      for (std::size_t at = 0; at < tokens[id].size();) {
        const Utf8Char c = utf8_char_at(tokens[id], at);
        if (!c.valid || c.cp >= byte_of_char.size() || byte_of_char[c.cp] < 0) {
          out = tokens[id];
          break;
        }
        out += static_cast<char>(byte_of_char[c.cp]);
        at += c.length;
      }
    }
    for (int b = 0; b < 256; ++b) {
      std::string& s = byte_text_[static_cast<std::size_t>(b)];
      append_utf8(s, chars[static_cast<std::size_t>(b)]);
      const auto it = ids_.find(s);
      byte_token_[static_cast<std::size_t>(b)] = it == ids_.end() ? -1 : it->second;
    }
    merges_.reserve(merges.size());
    for (std::size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string_view m = merges[rank];
      const std::size_t space = m.find(' ', 1);
      if (space == std::string_view::npos)
        throw FileError(source, "BPE merge " + std::to_string(rank) + " '" + std::string(m) + "' is not 'left right'");
      const TokenId left = id_of(m.substr(0, space)), right = id_of(m.substr(space + 1));
      const TokenId merged = id_of(std::string(m.substr(0, space)) + std::string(m.substr(space + 1)));
      if (left < 0 || right < 0 || merged < 0) continue;  // a merge into no token never applies
      merges_.emplace(pair_key(left, right), Merge{static_cast<std::int32_t>(rank), merged});
    }
  }

  std::size_t size() const { return bytes_.size(); }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // What token `id` stands for, as bytes.
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<std::size_t>(id)]; }
  // The token written exactly `text` (as the file writes it), or -1.
  TokenId id_of(std::string_view text) const {
    const auto it = ids_.find(std::string(text));
    return it == ids_.end() ? -1 : it->second;
  }

  // Appends the tokens of `text`, which holds no special token.
  void encode(std::string_view text, std::vector<TokenId>& out) const {
    WordSplitter splitter(pre_);
    std::vector<std::string_view> words;
    splitter.split(text, words);
    std::vector<Symbol> symbols;
    std::string whole;
    for (const std::string_view w : words) {
      if (ignore_merges_) {  // the word as the vocabulary writes it, a token already?
        whole.clear();
        for (const char ch : w) whole += byte_text_[static_cast<unsigned char>(ch)];
        if (const auto it = ids_.find(whole); it != ids_.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      encode_word(w, symbols, out);
    }
  }

 private:
  struct Merge {
    std::int32_t rank;
    TokenId merged;
  };
  struct Symbol {
    TokenId id;
    int prev, next;  // neighbours in the word, -1 at its ends
  };
  struct Candidate {  // the pair (left, its next) that merges at `rank`
    std::int32_t rank;
    int left;
    TokenId left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };

  static std::uint64_t pair_key(TokenId a, TokenId b) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32 | static_cast<std::uint32_t>(b);
  }

  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
  // the others for U+0100 onwards in byte order.
  static std::array<char32_t, 256> byte_chars() {
    std::array<char32_t, 256> c{};
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      c[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return c;
  }
  static void append_utf8(std::string& s, char32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {  // the byte characters are all below U+0800
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  void encode_word(std::string_view word, std::vector<Symbol>& symbols, std::vector<TokenId>& out) const {
    symbols.clear();
    for (const char ch : word) {
      const TokenId id = byte_token_[static_cast<unsigned char>(ch)];
      if (id < 0)
        throw InputError("byte " + std::to_string(static_cast<unsigned char>(ch)) +
                         " has no token in this BPE vocabulary, so the text cannot be encoded");
      const int i = static_cast<int>(symbols.size());
      symbols.push_back({id, i - 1, -1});
      if (i > 0) symbols[static_cast<std::size_t>(i - 1)].next = i;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto offer = [&](int left) {
      const int right = symbols[static_cast<std::size_t>(left)].next;
      if (right < 0) return;
      const TokenId a = symbols[static_cast<std::size_t>(left)].id, b = symbols[static_cast<std::size_t>(right)].id;
      const auto it = merges_.find(pair_key(a, b));
      if (it != merges_.end()) queue.push({it->second.rank, left, a, b});
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) offer(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& l = symbols[static_cast<std::size_t>(c.left)];
      if (l.id != c.left_id || l.next < 0 || symbols[static_cast<std::size_t>(l.next)].id != c.right_id) continue;  // stale
      Symbol& r = symbols[static_cast<std::size_t>(l.next)];
      l.id = merges_.at(pair_key(c.left_id, c.right_id)).merged;
      r.id = -1;  // gone
      l.next = r.next;
      if (l.next >= 0) symbols[static_cast<std::size_t>(l.next)].prev = c.left;
      if (l.prev >= 0) offer(l.prev);
      offer(c.left);
    }
    for (int i = 0; i >= 0 && !symbols.empty(); i = symbols[static_cast<std::size_t>(i)].next)
      out.push_back(symbols[static_cast<std::size_t>(i)].id);
  }

  PreTokenizer pre_;
  bool ignore_merges_;
  std::unordered_map<std::string, TokenId> ids_;
  std::array<std::string, 256> byte_text_;  // each byte as the vocabulary writes it
  std::vector<std::string> bytes_;
  std::array<TokenId, 256> byte_token_{};
  std::unordered_map<std::uint64_t, Merge> merges_;
};

}  // namespace streamllm
