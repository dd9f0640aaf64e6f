// A Hugging Face byte-level BPE tokenizer (tokenizer.json, and the
// tokenizer_config.json beside it) as GGUF's tokenizer metadata, written the
// way llama.cpp's converter writes it: model "gpt2", the tokens with their
// types (added special tokens are control tokens, other added ones
// user-defined), the merges, the pre-tokenizer's name, BOS / EOS / EOT and
// the chat template. The pre-tokenizer is told by its definition, not by the
// model's name. Needs nlohmann-json (the converter's dependency; not in the
// umbrella header).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/formats/gguf_writer.hpp"

namespace streamllm::formats {

struct HfTokenizer {
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;  // GGUF's: 1 normal, 3 control, 4 user-defined, 5 unused
  std::vector<std::string> merges;  // "left right"
  std::string pre;                  // tokenizer.ggml.pre
  std::int64_t bos = -1, eos = -1, eot = -1;
  bool add_bos = false;
  std::string chat_template;

  static HfTokenizer read(const std::string& path) {
    using nlohmann::json;
    const json t = parse(path);
    auto fail = [&](const std::string& problem) -> void { throw FileError(path, problem); };
    const json& model = t.value("model", json::object());
    if (model.value("type", "") != "BPE")
      fail("is not a BPE tokenizer (model.type '" + model.value("type", "") +
           "'); a SentencePiece model comes as its .model file");
    const json& vocab = model.value("vocab", json::object());
    if (!vocab.is_object() || vocab.empty()) fail("has no model.vocab");
    HfTokenizer h;
    auto place = [&](const std::string& text, const json& id, std::int32_t type) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= (1 << 24))
        fail("token '" + text + "' has id " + id.dump() + ", not a token id");
      const auto i = id.get<std::size_t>();
      if (i >= h.tokens.size()) {
        h.tokens.resize(i + 1);
        h.types.resize(i + 1, 0);
      }
      h.tokens[i] = text;
      h.types[i] = type;
    };
    for (const auto& [text, id] : vocab.items()) place(text, id, 1);
    for (const json& a : t.value("added_tokens", json::array()))
      place(a.value("content", ""), a.value("id", json()), a.value("special", false) ? 3 : 4);
    for (std::size_t i = 0; i < h.tokens.size(); ++i)
      if (h.types[i] == 0) {  // a hole in the ids: a placeholder, as llama.cpp's converter writes one
        h.tokens[i] = "[PAD" + std::to_string(i) + "]";
        h.types[i] = 5;
      }
    for (const json& m : model.value("merges", json::array())) {
      if (m.is_string())
        h.merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        h.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else
        fail("model.merges holds " + m.dump() + ", not a merge");
    }
    h.pre = pre_tokenizer_name(t.value("pre_tokenizer", json()), path);

    // tokenizer_config.json: BOS, EOS, whether BOS is added, the chat template.
    const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    const json config = std::filesystem::exists(config_path) ? parse(config_path.string()) : json::object();
    auto id_of = [&](const json& token) -> std::int64_t {
      const std::string text = token.is_string() ? token.get<std::string>() : token.is_object() ? token.value("content", "") : "";
      for (std::size_t i = 0; i < h.tokens.size(); ++i)
        if (!text.empty() && h.tokens[i] == text) return static_cast<std::int64_t>(i);
      return -1;
    };
    h.bos = id_of(config.value("bos_token", json()));
    h.eos = id_of(config.value("eos_token", json()));
    for (const char* turn_end : {"<|eot_id|>", "<|im_end|>"})
      if (h.eot < 0) h.eot = id_of(turn_end);
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      h.add_bos = config["add_bos_token"].get<bool>();
    else  // llama.cpp adds BOS for Llama 3's vocabulary, and for none of the other BPE ones
      h.add_bos = h.pre == "llama-bpe" && h.bos >= 0;
    const json& tmpl = config.value("chat_template", json());
    if (tmpl.is_string()) h.chat_template = tmpl.get<std::string>();
    for (const json& named : tmpl.is_array() ? tmpl : json::array())  // [{name, template}]: the default one
      if (named.value("name", "") == "default") h.chat_template = named.value("template", "");
    return h;
  }

  void write(GgufWriter& w) const {
    w.set("tokenizer.ggml.model", std::string("gpt2"));
    w.set("tokenizer.ggml.pre", pre);
    w.set("tokenizer.ggml.tokens", tokens);
    w.set("tokenizer.ggml.token_type", types);
    w.set("tokenizer.ggml.merges", merges);
    if (bos >= 0) w.set("tokenizer.ggml.bos_token_id", static_cast<std::uint32_t>(bos));
    if (eos >= 0) w.set("tokenizer.ggml.eos_token_id", static_cast<std::uint32_t>(eos));
    if (eot >= 0) w.set("tokenizer.ggml.eot_token_id", static_cast<std::uint32_t>(eot));
    w.set("tokenizer.ggml.add_bos_token", add_bos);
    if (!chat_template.empty()) w.set("tokenizer.chat_template", chat_template);
  }

 private:
  static nlohmann::json parse(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw FileError(path, "cannot open");
    try {
      return nlohmann::json::parse(f);
    } catch (const nlohmann::json::exception& e) {
      throw FileError(path, std::string("is not JSON: ") + e.what());
    }
  }

  // The GGUF name of the pre-tokenizer a tokenizer.json defines: Llama 3's
  // split regex, GPT-2's byte level alone, or SmolLM's single digits and
  // byte level.
  static std::string pre_tokenizer_name(const nlohmann::json& p, const std::string& path) {
    static const std::string kLlama3 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    auto byte_level = [](const nlohmann::json& s) {
      return s.is_object() && s.value("type", "") == "ByteLevel" && s.value("use_regex", true);
    };
    const nlohmann::json steps = p.is_object() && p.value("type", "") == "Sequence"
                                     ? p.value("pretokenizers", nlohmann::json::array())
                                     : nlohmann::json::array({p});
    if (steps.size() == 1 && byte_level(steps[0])) return "gpt-2";
    if (steps.size() == 2 && steps[0].value("type", "") == "Digits" && steps[0].value("individual_digits", false) &&
        byte_level(steps[1]))
      return "smollm";
    if (steps.size() == 2 && steps[0].value("type", "") == "Split" &&
        steps[0].value("pattern", nlohmann::json::object()).value("Regex", "") == kLlama3 &&
        steps[1].value("type", "") == "ByteLevel")
      return "llama-bpe";
    throw FileError(path,
                    "pre_tokenizer " + p.dump().substr(0, 200) +
                        " is not one streamllm knows (Llama 3's split, GPT-2's byte level, SmolLM's digits and byte level)");
  }
};

}  // namespace streamllm::formats
