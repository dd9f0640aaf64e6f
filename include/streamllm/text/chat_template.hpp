// Chat templates: the prompt formats of the Llama-architecture families,
// shared by ChatSession, the REPL and the server. A GGUF file carries its
// format as a Jinja template (tokenizer.chat_template); we recognise the
// family by its markers, as llama.cpp's llm_chat_detect_template does, with
// no Jinja engine, and render exactly the text Jinja renders for it.
//
// The families: llama2 (Meta's, system in <<SYS>>), llama2-nosys (the first
// Mistral-Instruct's), llama3 (with the dated system block of 3.1/3.2 when the
// template has one), mistral-v1, mistral-v3 (and -tekken), mistral-v7,
// chatml (SmolLM2, with its default system message) and zephyr
// (TinyLlama-Chat). A template we do not recognise is an error that names
// the override; a file without one gets llama2 and says so (note()).
//
// An answer the model generated is kept as the ids it was generated as:
// encoding its text again may split it otherwise (a model may sample another
// split than the tokenizer's), and then a cache holding the conversation
// would no longer match the prompt a client resends.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm {

struct ChatMessage {
  enum class Role { System, User, Assistant };
  Role role;
  std::string content;
};

// A template we cannot recognise: the message names the override.
class UnknownChatTemplate : public InputError {
 public:
  using InputError::InputError;
};

// A piece of a rendered dialog: text the template wrote (with the users'
// words), or an answer the model gave (`answer` = its message's index), kept
// apart so that the answer's generated ids can stand in for its text.
struct ChatPiece {
  std::string text;
  int answer = -1;
};

// Python's str.strip() and Jinja's trim, on ASCII whitespace.
inline std::string strip_chat_text(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n\v\f");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n\v\f");
  return std::string(s.substr(b, e - b + 1));
}

class ChatTemplate {
 public:
  enum class Family { Llama2, Llama3, MistralV1, MistralV3, MistralV7, ChatML, Zephyr };

  static std::span<const std::string_view> names() {
    static constexpr std::string_view all[] = {"llama2",     "llama2-nosys",      "llama3",     "llama3.1", "mistral-v1",
                                               "mistral-v3", "mistral-v3-tekken", "mistral-v7", "chatml",   "zephyr"};
    return all;
  }
  static std::string names_list() {
    std::string s;
    for (const auto n : names()) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
  }

  // A family by its name (names()).
  static ChatTemplate named(std::string_view name) {
    ChatTemplate t;
    t.name_ = std::string(name);
    if (name == "llama2") {
      t.family_ = Family::Llama2;
      t.system_ = t.bos_each_turn_ = t.strip_ = t.spaced_answer_ = true;  // Meta's Llama-2-chat
    } else if (name == "llama2-nosys") {
      t.family_ = Family::Llama2;  // Mistral-7B-Instruct v0.1/v0.2's first template
    } else if (name == "llama3") {
      t.family_ = Family::Llama3;
    } else if (name == "llama3.1") {
      t.family_ = Family::Llama3;
      t.knowledge_ = dated_system_block("December 2023", "26 Jul 2024");
    } else if (name == "mistral-v1") {
      t.family_ = Family::MistralV1;
    } else if (name == "mistral-v3") {
      t.family_ = Family::MistralV3;
    } else if (name == "mistral-v3-tekken") {
      t.family_ = Family::MistralV3;
      t.tekken_ = true;
    } else if (name == "mistral-v7") {
      t.family_ = Family::MistralV7;
    } else if (name == "chatml") {
      t.family_ = Family::ChatML;
    } else if (name == "zephyr") {
      t.family_ = Family::Zephyr;
    } else {
      throw InputError("chat template '" + std::string(name) + "' is not one streamllm knows; the names are " + names_list());
    }
    return t;
  }

  // The family of a Jinja template, by its markers. Throws
  // UnknownChatTemplate for a template of no family we render.
  static ChatTemplate recognise(std::string_view jinja) {
    const auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string_view::npos; };
    ChatTemplate t;
    if (has("<|im_start|>") && !has("<|im_sep|>")) {
      t = named("chatml");
      // SmolLM2 writes a system message of its own when the dialog has none.
      if (has("!= 'system'") || has("!= \"system\"")) t.default_system_ = literal_after(jinja, "<|im_start|>system", "<|im_end|>");
    } else if (has("[SYSTEM_PROMPT]")) {
      t = named("mistral-v7");
    } else if (has("[INST]")) {
      // llama2's variants differ in where BOS goes, stripping, and the space around an answer.
      const auto llama2 = [&](std::string_view name) {
        t = named(name);
        t.bos_each_turn_ = has("bos_token + '[INST]");
        t.strip_ = has(".strip()");
        t.spaced_answer_ = has("+ ' ' + eos_token");
      };
      if (has("<<SYS>>")) {
        llama2("llama2");
      } else if (has("' [INST] '")) {
        t = named("mistral-v1");
      } else if (has("' [/INST]'")) {
        llama2("llama2-nosys");
      } else {
        t = named(has("'[INST]'") || has("\"[INST]\"") ? "mistral-v3-tekken" : "mistral-v3");
      }
    } else if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
      t = named(has("Cutting Knowledge Date: ") ? "llama3.1" : "llama3");
      if (has("Cutting Knowledge Date: ")) {
        std::string cutoff = literal_after(jinja, "Cutting Knowledge Date: ", "\n");
        std::string date = literal_after(jinja, "set date_string = \"", "\"");
        t.knowledge_ = dated_system_block(cutoff, date.empty() ? "26 Jul 2024" : date);
      }
    } else if (has("<|user|>") && has("<|assistant|>") && !has("<|end|>")) {
      t = named("zephyr");
      if (!has("eos_token")) t.end_ = "<|endoftext|>";
    } else {
      const std::string head(jinja.substr(0, 60));
      throw UnknownChatTemplate("the model's chat template (tokenizer.chat_template, " + std::to_string(jinja.size()) +
                                " bytes, beginning \"" + head + "\") is of no family streamllm recognises; name one with " +
                                "--chat-template NAME (ChatTemplate::named in code): " + names_list());
    }
    return t;
  }

  // The format a model's file asks for, or `override_name` when given. A
  // file without a template (llama2.c files, SentencePiece .model files)
  // gets llama2, the format those models were made for; note() says so.
  static ChatTemplate for_model(const Tokenizer& tok, std::string_view override_name = {}) {
    if (!override_name.empty()) {
      ChatTemplate t = named(override_name);
      t.note_ = "chat template " + t.name_ + " (asked for)";
      return t;
    }
    if (tok.chat_template().empty()) {
      ChatTemplate t = named("llama2");
      t.note_ = "the model file has no chat template; using llama2 (--chat-template NAME chooses another)";
      return t;
    }
    ChatTemplate t = recognise(tok.chat_template());
    t.note_ = "chat template " + t.name_ + " (recognised in the model file)";
    return t;
  }

  const std::string& name() const { return name_; }
  Family family() const { return family_; }
  const std::string& note() const { return note_; }

  // The dialog as the template lays it out: an optional system message
  // first, then user and assistant messages in turn from the user's.
  // `add_generation_prompt` opens the assistant's turn after a user message.
  // A format with no place for a system message puts it before the first
  // user message's words, with a blank line between (as mistral-common
  // does); every other text is Jinja's, whitespace for whitespace.
  std::vector<ChatPiece> render(std::span<const ChatMessage> messages, std::string_view bos, std::string_view eos,
                                bool add_generation_prompt) const {
    using Role = ChatMessage::Role;
    check_order(messages);
    const bool has_system = !messages.empty() && messages[0].role == Role::System;
    const std::string system = has_system ? messages[0].content : std::string();
    int last_user = -1;
    for (std::size_t i = 0; i < messages.size(); ++i)
      if (messages[i].role == Role::User) last_user = static_cast<int>(i);
    Pieces out;
    const auto each = [&](auto&& body) {
      for (std::size_t i = has_system ? 1 : 0; i < messages.size(); ++i) body(static_cast<int>(i), messages[i]);
    };
    const bool generation = add_generation_prompt && !messages.empty() && messages.back().role == Role::User;
    switch (family_) {
      case Family::Llama2: {
        if (!bos_each_turn_) out.text(bos);
        each([&](int i, const ChatMessage& m) {
          const auto fit = [&](std::string s) { return strip_ ? strip_chat_text(s) : s; };
          if (m.role == Role::User) {
            std::string content = m.content;
            if (i == (has_system ? 1 : 0) && has_system)
              content = system_ ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content : system + "\n\n" + content;
            out.text(std::string(bos_each_turn_ ? bos : "") + "[INST] " + fit(content) + " [/INST]");
          } else {
            out.answer(i, (spaced_answer_ ? " " : "") + fit(m.content));
            out.text(std::string(spaced_answer_ ? " " : "") + std::string(eos));
          }
        });
        break;
      }
      case Family::Llama3: {
        const auto header = [](std::string_view role) { return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n"; };
        out.text(bos);
        if (!knowledge_.empty() || has_system) out.text(header("system") + knowledge_ + strip_chat_text(system) + "<|eot_id|>");
        each([&](int i, const ChatMessage& m) {
          if (m.role == Role::User) {
            out.text(header("user") + strip_chat_text(m.content) + "<|eot_id|>");
          } else {
            out.text(header("assistant"));
            out.answer(i, strip_chat_text(m.content));
            out.text("<|eot_id|>");
          }
        });
        if (generation) out.text(header("assistant"));
        break;
      }
      case Family::MistralV1:
      case Family::MistralV3:
      case Family::MistralV7: {
        // v1 puts the system message in the first user turn, v3 in the last,
        // v7 in a block of its own.
        const bool v1 = family_ == Family::MistralV1;
        out.text(bos);
        if (family_ == Family::MistralV7 && has_system) out.text("[SYSTEM_PROMPT] " + system + "[/SYSTEM_PROMPT]");
        const int system_turn = !has_system || family_ == Family::MistralV7 ? -1 : v1 ? 1 : last_user;
        each([&](int i, const ChatMessage& m) {
          if (m.role == Role::User) {
            const std::string open = v1 ? " [INST] " : tekken_ ? "[INST]" : "[INST] ";
            const std::string close = v1 ? " [/INST]" : "[/INST]";
            out.text(open + (i == system_turn ? system + "\n\n" : std::string()) + m.content + close);
          } else {
            out.answer(i, (tekken_ ? "" : " ") + m.content);
            out.text(eos);
          }
        });
        break;
      }
      case Family::ChatML: {
        if (!has_system && !default_system_.empty() && !messages.empty())
          out.text("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
        for (std::size_t i = 0; i < messages.size(); ++i) {
          const ChatMessage& m = messages[i];
          if (m.role == Role::Assistant) {
            out.text("<|im_start|>assistant\n");
            out.answer(static_cast<int>(i), m.content);
            out.text("<|im_end|>\n");
          } else {
            out.text("<|im_start|>" + std::string(role_name(m.role)) + "\n" + m.content + "<|im_end|>\n");
          }
        }
        if (generation) out.text("<|im_start|>assistant\n");
        break;
      }
      case Family::Zephyr: {
        const std::string end = end_.empty() ? std::string(eos) : end_;
        for (std::size_t i = 0; i < messages.size(); ++i) {
          const ChatMessage& m = messages[i];
          if (m.role == Role::Assistant) {
            out.text("<|assistant|>\n");
            out.answer(static_cast<int>(i), m.content);
            out.text(end + "\n");
          } else {
            out.text("<|" + std::string(role_name(m.role)) + "|>\n" + m.content + end + "\n");
          }
        }
        if (generation) out.text("<|assistant|>\n");
        break;
      }
    }
    return std::move(out.pieces);
  }

  // The rendered text, as Jinja renders the template.
  std::string apply(std::span<const ChatMessage> messages, std::string_view bos, std::string_view eos,
                    bool add_generation_prompt) const {
    std::string text;
    for (const ChatPiece& p : render(messages, bos, eos, add_generation_prompt)) text += p.text;
    return text;
  }
  std::string apply(std::span<const ChatMessage> messages, const Tokenizer& tok, bool add_generation_prompt = true) const {
    return apply(messages, special_text(tok, tok.bos()), special_text(tok, tok.eos()), add_generation_prompt);
  }

  static std::string special_text(const Tokenizer& tok, TokenId id) { return id < 0 ? std::string() : tok.piece(id); }
  static std::string_view role_name(ChatMessage::Role r) {
    return r == ChatMessage::Role::System ? "system" : r == ChatMessage::Role::User ? "user" : "assistant";
  }

 private:
  struct Pieces {
    std::vector<ChatPiece> pieces;
    void text(std::string_view s) {
      if (s.empty()) return;
      if (pieces.empty() || pieces.back().answer >= 0) pieces.push_back({});
      pieces.back().text += s;
    }
    void answer(int message, std::string s) { pieces.push_back({std::move(s), message}); }
  };

  // An optional system message first, then user and assistant in turn.
  static void check_order(std::span<const ChatMessage> messages) {
    using Role = ChatMessage::Role;
    bool expect_user = true;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const std::string at = "chat: message " + std::to_string(i);
      if (messages[i].role == Role::System) {
        if (i != 0) throw InputError(at + " is a system message; only the first may be");
      } else if (messages[i].role == Role::User) {
        if (!expect_user) throw InputError(at + " is a second user message in a row");
        expect_user = false;
      } else {
        if (expect_user) throw InputError(at + " is an answer that does not follow a user message");
        expect_user = true;
      }
    }
  }

  static std::string dated_system_block(std::string_view cutoff, std::string_view date) {
    return "Cutting Knowledge Date: " + std::string(cutoff) + "\nToday Date: " + std::string(date) + "\n\n";
  }

  // The text of a Jinja string literal after `start` (which it contains) up
  // to `stop` (a character sequence, escapes written out): "\n" and the
  // quote escapes as Jinja reads them.
  static std::string literal_after(std::string_view jinja, std::string_view start, std::string_view stop) {
    const auto at = jinja.find(start);
    if (at == std::string_view::npos) return {};
    std::string out;
    for (std::size_t i = at + start.size(); i < jinja.size(); ++i) {
      char c = jinja[i];
      if (c == '\\' && i + 1 < jinja.size()) {
        const char e = jinja[++i];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else if (c == '\'' || c == '"') {
        break;  // the literal ends before `stop`
      }
      out += c;
      if (out.size() >= stop.size() && out.compare(out.size() - stop.size(), stop.size(), stop) == 0) {
        out.resize(out.size() - stop.size());
        break;
      }
    }
    // "<|im_start|>system\n..." starts with the newline after the role.
    if (!out.empty() && out.front() == '\n' && start.back() != '\n') out.erase(0, 1);
    return out;
  }

  std::string name_, note_;
  Family family_ = Family::Llama2;
  bool system_ = false, bos_each_turn_ = false, strip_ = false, spaced_answer_ = false;  // llama2
  bool tekken_ = false;                                                                   // mistral-v3
  std::string knowledge_;       // llama3: the dated block its system turn starts with
  std::string default_system_;  // chatml: the system message of a dialog without one
  std::string end_;             // zephyr: the turn end when it is not EOS
};

// Answers the model generated, by their text: the ids to put back when a
// client resends the text. Bounded (least recently used forgotten first);
// thread-safe.
class KnownAnswers {
 public:
  explicit KnownAnswers(std::size_t max_tokens = std::size_t(1) << 22) : max_tokens_(max_tokens) {}

  void remember(std::string_view text, std::vector<TokenId> ids) {
    std::string key = strip_chat_text(text);
    if (key.empty() || ids.size() > max_tokens_) return;
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      tokens_ -= it->second->second.size();
      order_.erase(it->second);
      index_.erase(it);
    }
    tokens_ += ids.size();
    order_.emplace_front(std::move(key), std::move(ids));
    index_[order_.front().first] = order_.begin();
    while (tokens_ > max_tokens_) {
      tokens_ -= order_.back().second.size();
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  std::optional<std::vector<TokenId>> find(std::string_view text) const {
    const std::string key = strip_chat_text(text);
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  std::size_t size() const {
    std::lock_guard lock(mu_);
    return index_.size();
  }

 private:
  using Entry = std::pair<std::string, std::vector<TokenId>>;
  std::size_t max_tokens_, tokens_ = 0;
  mutable std::mutex mu_;
  mutable std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// An answer of a dialog and the ids it was read as.
struct DialogAnswer {
  std::string text;
  std::vector<TokenId> ids;
};

// The ids a model reads for a dialog: the template's text encoded with its
// special tokens, and every answer whose generated ids are known (`known`
// by text, or `answer_ids` by message index when not empty) as those ids,
// without the end-of-generation token the template writes itself. BOS
// first when the vocabulary adds one and the template did not write it (as
// llama.cpp does). `used` receives every answer with the ids it was read as.
// A prompt (`add_generation_prompt`) must end with the user's message.
inline std::vector<TokenId> encode_dialog(const Tokenizer& tok, const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                                          const KnownAnswers* known = nullptr, std::vector<DialogAnswer>* used = nullptr,
                                          bool add_generation_prompt = true,
                                          std::span<const std::vector<TokenId>> answer_ids = {}) {
  using Role = ChatMessage::Role;
  if (add_generation_prompt) {
    bool any_user = false;
    for (const ChatMessage& m : messages) any_user |= m.role == Role::User;
    if (!any_user) throw InputError("chat: the dialog has no user message");
    if (messages.back().role != Role::User) throw InputError("chat: the last message must be the user's");
  }
  std::vector<TokenId> ids;
  std::string text;
  const auto flush = [&] {
    const auto t = tok.encode_template_text(text);
    ids.insert(ids.end(), t.begin(), t.end());
    text.clear();
  };
  for (const ChatPiece& p :
       tmpl.render(messages, ChatTemplate::special_text(tok, tok.bos()), ChatTemplate::special_text(tok, tok.eos()), add_generation_prompt)) {
    if (p.answer < 0) {
      text += p.text;
      continue;
    }
    const auto i = static_cast<std::size_t>(p.answer);
    std::optional<std::vector<TokenId>> answer;
    if (i < answer_ids.size() && !answer_ids[i].empty())
      answer = answer_ids[i];
    else if (known)
      answer = known->find(messages[i].content);
    if (!answer) {
      text += p.text;  // read as text, in one piece with the template's
      if (used) used->push_back({messages[i].content, tok.encode(strip_chat_text(messages[i].content), false)});
      continue;
    }
    while (!answer->empty() && tok.ends_generation(answer->back())) answer->pop_back();
    if (used) used->push_back({messages[i].content, *answer});
    flush();
    ids.insert(ids.end(), answer->begin(), answer->end());
  }
  flush();
  if (tok.adds_bos() && (ids.empty() || ids.front() != tok.bos())) ids.insert(ids.begin(), tok.bos());
  return ids;
}

// The same with the model file's own template (ChatTemplate::for_model).
inline std::vector<TokenId> encode_dialog(const Tokenizer& tok, std::span<const ChatMessage> messages,
                                          const KnownAnswers* known = nullptr, std::vector<DialogAnswer>* used = nullptr) {
  return encode_dialog(tok, ChatTemplate::for_model(tok), messages, known, used);
}

// The ids the template writes after an answer ("</s>", "<|eot_id|>",
// "<|im_end|>\n"): how a server closes an answer in the cache it keeps, so
// that the next request's prompt finds it whole.
inline std::vector<TokenId> answer_end_ids(const Tokenizer& tok, const ChatTemplate& tmpl) {
  const ChatMessage probe[] = {{ChatMessage::Role::User, "?"}, {ChatMessage::Role::Assistant, "!"}};
  const auto pieces =
      tmpl.render(probe, ChatTemplate::special_text(tok, tok.bos()), ChatTemplate::special_text(tok, tok.eos()), false);
  for (std::size_t i = 0; i + 1 < pieces.size(); ++i)
    if (pieces[i].answer >= 0) return tok.encode_template_text(pieces[i + 1].text);
  return {};
}

}  // namespace streamllm
