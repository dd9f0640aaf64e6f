// Writes a GGUF model of any shape with random weights and a byte-level BPE
// vocabulary from another file. With N below its size, the vocabulary is cut
// to its first N tokens and the merges among them, and the last three become
// chatml's control tokens (<|endoftext|>, <|im_start|>, <|im_end|>) as
// SmolLM2's vocabulary has them, with pre-tokeniser PRE and the chat
// template read from TEMPLATE.jinja; with N its size ("-" for PRE and the
// template), the vocabulary, its special tokens and template stay as they
// are (a Llama-3-shaped file from Llama 3's). For the example programs on
// shapes no real file here has.
//   write_bpe_model OUT VOCAB.gguf N PRE TEMPLATE.jinja TYPE dim hidden layers heads kv_heads
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include "streamllm/formats/gguf.hpp"
#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/generation/sampler.hpp"
#include "streamllm/loaders/convert.hpp"

using namespace streamllm;

int main(int argc, char** argv) try {
  if (argc != 12) {
    std::fprintf(stderr, "usage: %s OUT VOCAB.gguf N PRE TEMPLATE.jinja TYPE dim hidden layers heads kv_heads\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1], pre = argv[4];
  const auto keep = static_cast<std::size_t>(std::atoll(argv[3]));
  const loaders::ConvertRecipe recipe = loaders::parse_recipe(argv[6]);
  ModelShape s;
  std::int64_t* fields[] = {&s.dim, &s.hidden_dim, &s.layers, &s.heads, &s.kv_heads};
  for (int i = 0; i < 5; ++i) *fields[i] = std::atoll(argv[i + 7]);
  s.vocab = static_cast<std::int64_t>(keep);
  s.max_seq = 8192;

  const formats::GgufFile vocab(argv[2]);
  auto strings = [&](const char* key) {
    const formats::GgufValue* list = vocab.find(key);
    if (!list) throw InputError(std::string("the vocabulary has no ") + key);
    return std::vector<std::string>(list->strings.begin(), list->strings.end());
  };
  std::vector<std::string> tokens = strings("tokenizer.ggml.tokens"), merges = strings("tokenizer.ggml.merges");
  if (tokens.size() < keep || keep < 259) throw InputError("the vocabulary has " + std::to_string(tokens.size()) + " tokens");
  formats::GgufWriter w;
  loaders::write_llama_metadata(w, s, recipe, "bpe-test-model");
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  if (keep == tokens.size()) {  // the vocabulary as it is
    for (const char* key : {"tokenizer.ggml.pre", "tokenizer.chat_template"})
      if (const auto v = vocab.string(key)) w.set(key, std::string(*v));
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
      if (vocab.find(key)) w.set(key, static_cast<std::uint32_t>(*vocab.integer(key)));
    if (const formats::GgufValue* add = vocab.find("tokenizer.ggml.add_bos_token")) w.set("tokenizer.ggml.add_bos_token", add->integer != 0);
    const formats::GgufValue* t = vocab.find("tokenizer.ggml.token_type");
    std::vector<std::int32_t> types(keep, 1);
    for (std::size_t i = 0; t && i < keep; ++i) {
      std::int32_t v;
      std::memcpy(&v, t->raw + 4 * i, 4);
      types[i] = v;
    }
    w.set("tokenizer.ggml.tokens", tokens);
    w.set("tokenizer.ggml.token_type", types);
    w.set("tokenizer.ggml.merges", merges);
  } else {
    tokens.resize(keep);
    const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 3; ++i) tokens[keep - 3 + static_cast<std::size_t>(i)] = specials[i];
    const std::unordered_set<std::string> known(tokens.begin(), tokens.end() - 3);
    std::vector<std::string> kept_merges;
    for (const std::string& m : merges) {
      const auto space = m.find(' ');
      const std::string a = m.substr(0, space), b = m.substr(space + 1);
      if (known.count(a) && known.count(b) && known.count(a + b)) kept_merges.push_back(m);
    }
    merges = kept_merges;
    std::vector<std::int32_t> types(keep, 1);
    for (std::size_t i = keep - 3; i < keep; ++i) types[i] = 3;  // control
    w.set("tokenizer.ggml.pre", pre);
    w.set("tokenizer.ggml.tokens", tokens);
    w.set("tokenizer.ggml.token_type", types);
    w.set("tokenizer.ggml.merges", merges);
    w.set("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(keep - 2));
    w.set("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(keep - 1));
    w.set("tokenizer.ggml.add_bos_token", false);
    std::ifstream tf(argv[5], std::ios::binary);
    if (!tf) throw InputError(std::string("cannot read ") + argv[5]);
    w.set("tokenizer.chat_template", std::string((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>()));
  }

  Rng rng(7);
  auto tensor = [&](const std::string& name, std::vector<std::int64_t> dims, float mean, float spread) {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = mean + (rng.uniform() - 0.5f) * spread;
    loaders::add_converted_tensor(w, recipe, name, dims, v.data(), s.layers, s.heads / s.kv_heads, true);
  };
  const std::int64_t D = s.dim, H = s.hidden_dim, KV = s.dim / s.heads * s.kv_heads;
  tensor("token_embd.weight", {D, s.vocab}, 0.0f, 0.2f);
  for (std::int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tensor(p + "attn_norm.weight", {D}, 1.0f, 0.1f);
    tensor(p + "attn_q.weight", {D, D}, 0.0f, 0.1f);
    tensor(p + "attn_k.weight", {D, KV}, 0.0f, 0.1f);
    tensor(p + "attn_v.weight", {D, KV}, 0.0f, 0.1f);
    tensor(p + "attn_output.weight", {D, D}, 0.0f, 0.1f);
    tensor(p + "ffn_norm.weight", {D}, 1.0f, 0.1f);
    tensor(p + "ffn_gate.weight", {D, H}, 0.0f, 0.1f);
    tensor(p + "ffn_down.weight", {H, D}, 0.0f, 0.1f);
    tensor(p + "ffn_up.weight", {D, H}, 0.0f, 0.1f);
  }
  tensor("output_norm.weight", {D}, 1.0f, 0.1f);  // no output.weight: the classifier is the embedding (tied)
  w.write(out);
  std::printf("wrote %s: %zu tokens, %zu merges\n", out.c_str(), tokens.size(), merges.size());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "write_bpe_model: %s\n", e.what());
  return 1;
}
