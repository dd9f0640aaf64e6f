// Byte-level BPE against llama.cpp's tokenizer test vectors, the streaming
// detokeniser over BPE's byte pieces, special tokens and the pre-tokenisers.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "common.hpp"
#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/loaders/convert.hpp"
#include "streamllm/streamllm.hpp"

using namespace streamllm;

namespace {

// llama.cpp's test-tokenizer-0 vectors: texts separated by a line
// "__ggml_vocab_test__", and one line of ids per text.
struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};
std::vector<VocabCase> vocab_cases(const std::string& name) {
  const auto dir = test::data_dir() / "tokenizer-vectors";
  auto read = [](const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) FAIL("cannot read " << p.string());
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  };
  const std::string inp = read(dir / (name + ".inp")), out = read(dir / (name + ".out"));
  std::vector<VocabCase> cases;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (std::size_t at = 0, end; (end = inp.find(sep, at)) != std::string::npos; at = end + sep.size())
    cases.push_back({inp.substr(at, end - at), {}});
  std::istringstream lines(out);
  std::string line;
  for (auto& c : cases) {
    if (!std::getline(lines, line)) FAIL(name << ".out has fewer lines than " << name << ".inp has texts");
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

// Its vocabulary as a GGUF file, written once by the converter.
const Tokenizer& llama3_tokenizer() {
  static const Tokenizer t = [] {
    const auto out = (test::scratch() / "llama3-vocab.gguf").string();
    loaders::convert_tokenizer_to_gguf(test::llama3_tokenizer_json(), out);
    return Tokenizer::load(out);
  }();
  return t;
}

std::string detokenize_streaming(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  StreamingDetokenizer d(tok);
  std::string s;
  for (const TokenId id : ids) s += d.push(id);
  s += d.finish();
  return s;
}

// How many of llama.cpp's texts for `name` encode (no BOS, special tokens
// parsed) to llama.cpp's ids; each must also decode back, whole and streamed.
int cases_equal_to_llama_cpp(const Tokenizer& tok, const std::string& name) {
  const auto cases = vocab_cases(name);
  REQUIRE(cases.size() == 46);
  int equal = 0;
  for (const auto& c : cases) {
    INFO(name << " text '" << c.text << "'");
    const auto ids = tok.encode(c.text, false, true);
    CHECK(ids == c.ids);
    equal += ids == c.ids;
    CHECK(tok.decode(ids) == c.text);
    CHECK(detokenize_streaming(tok, ids) == c.text);
  }
  return equal;
}

}  // namespace

TEST_CASE("GPT-2's BPE vocabulary encodes llama.cpp's 46 test texts to llama.cpp's ids and decodes them back",
          "[tokenizer][bpe]") {
  const auto tok = Tokenizer::load((test::data_dir() / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf").string());
  REQUIRE(tok.byte_level());
  REQUIRE(tok.vocab_size() == 50257);
  REQUIRE_FALSE(tok.adds_bos());
  REQUIRE(tok.encode("Hi", true) == tok.encode("Hi", false));  // no BOS, as the file says
  REQUIRE(cases_equal_to_llama_cpp(tok, "gpt-2") == 46);
}

TEST_CASE("Llama 3's tokenizer.json, converted to GGUF, encodes llama.cpp's 46 test texts to llama.cpp's ids",
          "[tokenizer][bpe]") {
  const Tokenizer& tok = llama3_tokenizer();
  REQUIRE(tok.byte_level());
  REQUIRE(tok.vocab_size() == 128256);
  REQUIRE(tok.bos() == 128000);
  REQUIRE(tok.piece(tok.bos()) == "<|begin_of_text|>");
  REQUIRE(tok.adds_bos());
  REQUIRE(cases_equal_to_llama_cpp(tok, "llama-bpe") == 46);
  // BOS as the file says, and the chat markers as single tokens.
  const auto turn = tok.encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", true, true);
  REQUIRE(turn == std::vector<TokenId>{128000, 128006, 882, 128007, 271, 13347, 128009});
  // Generation ends at the end of text and of a turn, as llama.cpp's llama_vocab_is_eog says
  // (Llama 3.0's vocabulary: <|eom_id|> came with 3.1).
  REQUIRE(tok.end_of_generation_tokens() == std::vector<TokenId>{128001, 128009});
  REQUIRE_FALSE(tok.ends_generation(128006));
}

TEST_CASE("a BPE control token is one token only where the caller parses special tokens", "[tokenizer][bpe]") {
  const auto tok = Tokenizer::load((test::data_dir() / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf").string());
  const TokenId eot = 50256;
  REQUIRE(tok.piece(eot) == "<|endoftext|>");
  REQUIRE(tok.kind(eot) == Tokenizer::Kind::Control);
  const auto parsed = tok.encode("Hi<|endoftext|> there", false, true);
  REQUIRE(parsed == std::vector<TokenId>{tok.encode("Hi", false)[0], eot, tok.encode(" there", false)[0]});
  const auto plain = tok.encode("Hi<|endoftext|> there", false, false);
  REQUIRE(std::find(plain.begin(), plain.end(), eot) == plain.end());
  REQUIRE(tok.decode(plain) == "Hi<|endoftext|> there");
  // A control token adds no text; the bytes around it still join into characters.
  REQUIRE(tok.decode(parsed) == "Hi there");
}

TEST_CASE("the streaming detokeniser holds back a character BPE split over tokens and hands it out whole", "[tokenizer][bpe]") {
  const auto tok = Tokenizer::load((test::data_dir() / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf").string());
  const std::string text = "caf\xc3\xa9 \xf0\x9f\xa6\x99 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e";  // café 🦙 日本語
  const auto ids = tok.encode(text, false);
  StreamingDetokenizer d(tok);
  std::string joined;
  bool held = false;
  for (const TokenId id : ids) {
    const std::string_view piece = d.push(id);
    REQUIRE(first_invalid_utf8(piece) == std::string_view::npos);
    held = held || d.held_bytes() > 0;
    joined += piece;
  }
  joined += d.finish();
  REQUIRE(held);  // the llama emoji is more than one token in GPT-2's vocabulary
  REQUIRE(joined == text);
  // Bytes that never complete a character become U+FFFD, in decode and in the stream alike.
  const TokenId lead = tok.encode("\xf0", false).at(0);  // a lone 4-byte lead: a byte token
  const std::vector<TokenId> broken{lead, tok.encode("a", false)[0]};
  REQUIRE(tok.decode(broken) ==
          "\xef\xbf\xbd"
          "a");
  REQUIRE(detokenize_streaming(tok, broken) == tok.decode(broken));
}

TEST_CASE("the pre-tokenisers cut words as their regexes do", "[tokenizer][bpe]") {
  auto words = [](PreTokenizer pre, std::string_view text) {
    std::vector<std::string_view> w;
    WordSplitter(pre).split(text, w);
    return std::vector<std::string>(w.begin(), w.end());
  };
  using V = std::vector<std::string>;
  // gpt-2: contractions in lower case only, one space joins the next word, a
  // run of spaces leaves its last one to what follows (a newline stands alone then).
  REQUIRE(words(PreTokenizer::Gpt2, "I'll say   it's 12345!!\n\nOK") ==
          V{"I", "'ll", " say", "  ", " it", "'s", " 12345", "!!", "\n", "\n", "OK"});
  REQUIRE(words(PreTokenizer::Gpt2, "WE'LL") == V{"WE", "'", "LL"});
  // llama-bpe: contractions in any case, numbers in threes, a non-letter
  // joins the letters after it, newlines end their run of spaces.
  REQUIRE(words(PreTokenizer::Llama3, "WE'LL pay 1234567 (now)\n\n  ok  ") ==
          V{"WE", "'LL", " pay", " ", "123", "456", "7", " (", "now", ")\n\n", " ", " ok", "  "});
  REQUIRE(words(PreTokenizer::Llama3, "a \n\n b") == V{"a", " \n\n", " b"});
  // smollm: every digit alone.
  REQUIRE(words(PreTokenizer::SmolLM, "x 2024 y") == V{"x", " ", "2", "0", "2", "4", " y"});
  // Letters and numbers beyond ASCII: the Unicode categories.
  REQUIRE(words(PreTokenizer::Gpt2, "na\xc3\xafve \xd9\xa3\xd9\xa4") == V{"na\xc3\xafve", " \xd9\xa3\xd9\xa4"});
  // Invalid UTF-8 is kept byte for byte, never dropped.
  REQUIRE(words(PreTokenizer::Llama3, "a\xff\xfe b") == V{"a", "\xff\xfe", " b"});
}

TEST_CASE("a BPE vocabulary file that cannot be read says what is wrong with it", "[tokenizer][bpe][bad_input]") {
  auto write = [](const std::string& name, const std::string& pre, std::vector<std::string> merges) {
    formats::GgufWriter w;
    w.set("general.architecture", std::string("llama"));
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.pre", pre);
    w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b", "ab"});
    w.set("tokenizer.ggml.merges", std::move(merges));
    const auto path = (test::scratch() / name).string();
    w.write(path);
    return path;
  };
  REQUIRE(Tokenizer::load(write("bpe-ok.gguf", "gpt-2", {"a b"})).encode("ab", false) == std::vector<TokenId>{2});
  REQUIRE_THROWS_WITH(Tokenizer::load(write("bpe-pre.gguf", "klingon", {"a b"})),
                      Catch::Contains("klingon") && Catch::Contains("tokenizer.ggml.pre") && Catch::Contains("llama-bpe"));
  REQUIRE_THROWS_WITH(Tokenizer::load(write("bpe-merge.gguf", "gpt-2", {"ab"})),
                      Catch::Contains("bpe-merge.gguf") && Catch::Contains("merge 0"));
  // A byte with no token (this vocabulary has only a and b) cannot be encoded: an error, not a dropped byte.
  REQUIRE_THROWS_AS(Tokenizer::load(write("bpe-bytes.gguf", "gpt-2", {"a b"})).encode("abc", false), InputError);
}
