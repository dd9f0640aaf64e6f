// SentencePiece's ModelProto as plain data: the pieces (text, score, type)
// and the normalizer flags that change how text is split. Read from a .model
// file or from GGUF's tokenizer.ggml.* metadata, and serialised back for
// SentencePiece to load.
#pragma once

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "streamllm/formats/gguf.hpp"
#include "streamllm/formats/protobuf.hpp"

namespace streamllm::formats {

struct SentencePieceModel {
  enum Type : int { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };
  struct Piece {
    std::string text;
    float score = 0;
    int type = Normal;
  };
  std::vector<Piece> pieces;
  int bos_id = 1, eos_id = 2, unk_id = 0, pad_id = -1;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = false;

  bool has_byte_pieces() const {
    for (const auto& p : pieces)
      if (p.type == Byte) return true;
    return false;
  }

  // ModelProto: pieces (1), trainer_spec (2), normalizer_spec (3).
  std::string serialize() const {
    ProtoWriter model;
    for (const auto& p : pieces) {
      ProtoWriter piece;
      piece.bytes(1, p.text);
      piece.real(2, p.score);
      if (p.type != Normal) piece.integer(3, p.type);
      model.message(1, piece);
    }
    ProtoWriter trainer;
    trainer.integer(3, 2);  // model_type: BPE
    trainer.integer(4, static_cast<std::int64_t>(pieces.size()));
    trainer.integer(26, 1);                          // allow_whitespace_only_pieces, as Llama's tokenizer
    trainer.integer(35, has_byte_pieces() ? 1 : 0);  // byte_fallback
    trainer.integer(40, unk_id);
    trainer.integer(41, bos_id);
    trainer.integer(42, eos_id);
    trainer.integer(43, pad_id);
    model.message(2, trainer);
    ProtoWriter normalizer;
    normalizer.bytes(1, "identity");
    normalizer.integer(3, add_dummy_prefix ? 1 : 0);
    normalizer.integer(4, remove_extra_whitespaces ? 1 : 0);
    normalizer.integer(5, 1);  // escape_whitespaces
    model.message(3, normalizer);
    return model.str();
  }

  // From a serialised ModelProto (a .model file's bytes).
  static SentencePieceModel parse(std::string_view proto, const std::string& what) {
    SentencePieceModel m;
    m.remove_extra_whitespaces = true;  // the proto's default
    ProtoReader r(proto, what);
    ProtoReader::Field f;
    while (r.next(f)) {
      if (f.number == 1 && f.wire == 2) {
        Piece p;
        ProtoReader pr(f.bytes, what);
        ProtoReader::Field g;
        while (pr.next(g)) {
          if (g.number == 1 && g.wire == 2) p.text = std::string(g.bytes);
          if (g.number == 2 && g.wire == 5) std::memcpy(&p.score, &g.value, 4);
          if (g.number == 3 && g.wire == 0) {
            if (g.value < static_cast<std::uint64_t>(Normal) || g.value > static_cast<std::uint64_t>(Byte))
              throw FileError(what, "piece " + std::to_string(m.pieces.size()) + " has type " + std::to_string(g.value) +
                                        ", not a SentencePiece piece type (1-6)");
            p.type = static_cast<int>(g.value);
          }
        }
        m.pieces.push_back(std::move(p));
      } else if (f.number == 2 && f.wire == 2) {
        ProtoReader tr(f.bytes, what);
        ProtoReader::Field g;
        while (tr.next(g)) {
          if (g.wire != 0) continue;
          const auto v = static_cast<int>(static_cast<std::int64_t>(g.value));
          if (g.number == 40) m.unk_id = v;
          if (g.number == 41) m.bos_id = v;
          if (g.number == 42) m.eos_id = v;
          if (g.number == 43) m.pad_id = v;
        }
      } else if (f.number == 3 && f.wire == 2) {
        ProtoReader nr(f.bytes, what);
        ProtoReader::Field g;
        while (nr.next(g)) {
          if (g.number == 3 && g.wire == 0) m.add_dummy_prefix = g.value != 0;
          if (g.number == 4 && g.wire == 0) m.remove_extra_whitespaces = g.value != 0;
        }
      }
    }
    if (m.pieces.empty()) throw FileError(what, "SentencePiece model has no pieces");
    const auto n = static_cast<std::int64_t>(m.pieces.size());
    for (auto [name, id] :
         {std::pair<const char*, int>{"unk_id", m.unk_id}, {"bos_id", m.bos_id}, {"eos_id", m.eos_id}, {"pad_id", m.pad_id}})
      if (id < -1 || id >= n)
        throw FileError(what, std::string(name) + " " + std::to_string(id) + " is outside the " + std::to_string(n) + " pieces");
    return m;
  }

  static SentencePieceModel read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(path, "cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), path);
  }

  // From GGUF's tokenizer.ggml.* metadata (the "llama" SentencePiece family).
  // GGUF does not carry the normalizer flags: tokenizer.ggml.add_space_prefix
  // and .remove_extra_whitespaces are used when present; otherwise the dummy
  // prefix is on (as in llama.cpp) and extra-whitespace removal is inferred
  // from the vocabulary: a model trained with it never saw a run of spaces,
  // so it has no piece made of two or more U+2581.
  static SentencePieceModel from_gguf(const GgufFile& f) {
    const auto model = f.string("tokenizer.ggml.model");
    if (!model) f.fail("has no tokenizer (tokenizer.ggml.model is missing); give a .model file");
    if (*model != "llama") f.fail("tokenizer '" + std::string(*model) + "' is not SentencePiece ('llama')");
    const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GgufType::Array || tokens->elem != GgufType::String)
      f.fail("tokenizer.ggml.tokens is missing or not an array of strings");
    const GgufValue* scores = f.find("tokenizer.ggml.scores");
    const GgufValue* types = f.find("tokenizer.ggml.token_type");
    const std::uint64_t n = tokens->count;
    if (scores && (scores->type != GgufType::Array || scores->count != n || gguf_scalar_size(scores->elem) == 0))
      f.fail("tokenizer.ggml.scores does not hold one number per token");
    if (types && (types->type != GgufType::Array || types->count != n || gguf_scalar_size(types->elem) == 0))
      f.fail("tokenizer.ggml.token_type does not hold one number per token");
    SentencePieceModel m;
    bool space_runs = false;
    for (std::uint64_t i = 0; i < n; ++i) {
      Piece p{std::string(tokens->strings[static_cast<std::size_t>(i)]), 0.0f, Normal};
      // Values come from the file: range-check before converting (a double
      // outside float's or int's range does not convert, it is UB).
      if (scores) {
        const double s = scores->number_at(i);
        if (!std::isfinite(s) || std::fabs(s) > std::numeric_limits<float>::max())
          f.fail("tokenizer.ggml.scores[" + std::to_string(i) + "] is not a finite float");
        p.score = static_cast<float>(s);
      }
      if (types) {
        // 1..6 as in SentencePiece; llama.cpp writes 0 for "undefined", read as normal.
        const double t = types->number_at(i);
        if (!(t >= 0 && t <= static_cast<int>(Byte)) || t != std::floor(t))
          f.fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] is " + (std::ostringstream() << t).str() +
                 ", not a token type (0-6)");
        p.type = t == 0 ? Normal : static_cast<int>(t);
      }
      if (p.text.size() >= 6 && p.text.find_first_not_of("\xe2\x96\x81") == std::string::npos) space_runs = true;
      m.pieces.push_back(std::move(p));
    }
    auto id = [&](const char* key, int fallback) {
      const auto v = f.integer(key);
      return v && *v >= 0 && static_cast<std::uint64_t>(*v) < n ? static_cast<int>(*v) : fallback;
    };
    m.bos_id = id("tokenizer.ggml.bos_token_id", 1);
    m.eos_id = id("tokenizer.ggml.eos_token_id", 2);
    m.unk_id = id("tokenizer.ggml.unknown_token_id", 0);
    m.pad_id = id("tokenizer.ggml.padding_token_id", -1);
    const GgufValue* prefix = f.find("tokenizer.ggml.add_space_prefix");
    m.add_dummy_prefix = prefix ? prefix->integer != 0 : true;
    const GgufValue* rews = f.find("tokenizer.ggml.remove_extra_whitespaces");
    m.remove_extra_whitespaces = rews ? rews->integer != 0 : !space_runs;
    return m;
  }
};

}  // namespace streamllm::formats
