// Tokenisation, and the streaming detokeniser against SentencePiece's decode.
#include <random>

#include "common.hpp"

using namespace streamllm;

namespace {

const Tokenizer& tok512() {
  static const Tokenizer t(test::model_path("tok512.model"));
  return t;
}
const Tokenizer& llama_tok() {
  static const Tokenizer t(test::model_path("tokenizer.model"));
  return t;
}

// Streams ids through the detokeniser; returns the pieces handed out.
std::vector<std::string> stream(const Tokenizer& tok, std::span<const TokenId> ids) {
  StreamingDetokenizer d(tok);
  std::vector<std::string> pieces;
  for (TokenId id : ids) pieces.emplace_back(d.push(id));
  pieces.emplace_back(d.finish());
  return pieces;
}

std::string concat(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

}  // namespace

TEST_CASE("encode adds BOS and matches the published ids", "[tokenizer]") {
  REQUIRE(tok512().encode("Once upon a time") == std::vector<TokenId>{1, 403, 407, 261, 378});
  REQUIRE(llama_tok().encode("Once upon a time") == std::vector<TokenId>{1, 9038, 2501, 263, 931});
  REQUIRE(tok512().encode("Once upon a time", false) == std::vector<TokenId>{403, 407, 261, 378});
  REQUIRE(tok512().vocab_size() == 512);
  REQUIRE(tok512().bos() == 1);
  REQUIRE(tok512().eos() == 2);
}

TEST_CASE("golden prompts encode to the golden prompt ids", "[tokenizer][golden]") {
  for (const char* mode : {"dense", "sink_window"})
    for (const auto& g : test::goldens(mode)) {
      INFO(g.name);
      REQUIRE(tok512().encode(g.prompt) == g.prompt_ids);
    }
}

TEST_CASE("streamed pieces of every golden concatenate to its text, each valid UTF-8", "[tokenizer][golden]") {
  for (const char* mode : {"dense", "sink_window"})
    for (const auto& g : test::goldens(mode)) {
      const auto pieces = stream(tok512(), std::span<const TokenId>(g.ids).subspan(1));
      INFO(g.name);
      for (const auto& p : pieces) REQUIRE(test::valid_utf8(p));
      REQUIRE(concat(pieces) == g.text);
    }
}

TEST_CASE("byte-fallback pieces are held back until their UTF-8 sequence is complete", "[tokenizer]") {
  // The Llama 2 vocabulary has no piece for these emoji and rare letters, so
  // they are spelled with <0xNN> byte pieces, 2 to 4 per character.
  const std::string text =
      "Caf\xc3\xa9 \xf0\x9f\xa6\x99 na\xc3\xafve \xe2\x80\x94 \xc5\x93uvre \xf0\x9f\x98\x80\xf0\x9f\x8e\x89 \xe1\xba\x9e";
  for (const Tokenizer* tok : {&llama_tok(), &tok512()}) {
    const auto ids = tok->encode(text);
    std::size_t byte_pieces = 0;
    for (TokenId id : ids) byte_pieces += tok->kind(id) == Tokenizer::Kind::Byte;
    INFO("tokenizer " << tok->source());
    REQUIRE(byte_pieces >= 4);  // at least the llama emoji went to bytes
    StreamingDetokenizer d(*tok);
    std::string all;
    std::size_t held = 0;
    for (TokenId id : ids) {
      const std::string piece(d.push(id));
      REQUIRE(test::valid_utf8(piece));
      if (tok->kind(id) == Tokenizer::Kind::Byte && piece.empty()) {
        ++held;
        REQUIRE(d.held_bytes() > 0);
      }
      all += piece;
    }
    all += d.finish();
    REQUIRE(held >= 3);  // the 4-byte emoji waited for its last byte
    REQUIRE(all == tok->decode(std::span<const TokenId>(ids).subspan(1)));
    REQUIRE(all == text);
  }
}

TEST_CASE("the detokeniser matches decode on random id sequences, broken UTF-8 included", "[tokenizer]") {
  // Random ids exercise what text never does: stray continuation bytes,
  // truncated sequences, control and unknown tokens anywhere, spaces at the start.
  for (const Tokenizer* tok : {&tok512(), &llama_tok()}) {
    std::mt19937 gen(42);
    std::vector<TokenId> bytes, others;
    for (TokenId id = 0; id < tok->vocab_size(); ++id) (tok->kind(id) == Tokenizer::Kind::Byte ? bytes : others).push_back(id);
    for (int trial = 0; trial < 3000; ++trial) {
      std::vector<TokenId> ids(gen() % 12);
      for (auto& id : ids) {
        const auto r = gen() % 10;
        id = r < 5 ? bytes[gen() % bytes.size()] : r < 7 ? static_cast<TokenId>(gen() % 3) : others[gen() % others.size()];
      }
      const auto pieces = stream(*tok, ids);
      INFO("tokenizer " << tok->source() << " trial " << trial);
      REQUIRE(concat(pieces) == tok->decode(ids));
      for (const auto& p : pieces) REQUIRE(test::valid_utf8(p));
    }
  }
}

TEST_CASE("decode rejects ids outside the vocabulary", "[tokenizer][errors]") {
  const std::vector<TokenId> bad{1, 600};
  REQUIRE_THROWS_AS(tok512().decode(bad), InputError);
  StreamingDetokenizer d(tok512());
  REQUIRE_THROWS_WITH(d.push(-1), Catch::Contains("out of range") && Catch::Contains("tok512.model"));
}
