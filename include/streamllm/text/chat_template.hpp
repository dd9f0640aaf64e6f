// Meta's Llama 2 dialog format (llama/generation.py, chat_completion), shared
// by ChatSession and the server: every user turn is BOS + "[INST] {content}
// [/INST]", every answer ends with EOS; a system prompt goes inside the first
// user turn between <<SYS>> markers.
//
// An answer the model generated is kept as the ids it was generated as:
// encoding its text again may split it otherwise (SentencePiece gives one
// canonical split, a model may sample another), and then a cache holding
// the conversation would no longer match the prompt a client resends.
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

struct Llama2ChatTemplate {
  static std::string strip(std::string_view s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
  }

  // The text of a user turn (BOS is added as a token, not as text).
  static std::string user_turn(std::string_view user, std::string_view system) {
    std::string content =
        system.empty() ? std::string(user) : "<<SYS>>\n" + std::string(system) + "\n<</SYS>>\n\n" + std::string(user);
    return "[INST] " + strip(content) + " [/INST]";
  }

  // A user turn as the model reads it: BOS and the turn's pieces.
  static std::vector<TokenId> encode_user_turn(const Tokenizer& tok, std::string_view user, std::string_view system) {
    std::vector<TokenId> ids{tok.bos()};
    const auto body = tok.encode(user_turn(user, system), false);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }

  // An answer closed as the format wants it: with EOS.
  static void close_answer(const Tokenizer& tok, std::vector<TokenId>& answer) {
    if (answer.empty() || answer.back() != tok.eos()) answer.push_back(tok.eos());
  }
};

// Answers the model generated, by their text: the ids to put back when a
// client resends the text. Bounded (least recently used forgotten first);
// thread-safe.
class KnownAnswers {
 public:
  explicit KnownAnswers(std::size_t max_tokens = std::size_t(1) << 22) : max_tokens_(max_tokens) {}

  void remember(std::string_view text, std::vector<TokenId> ids) {
    std::string key = Llama2ChatTemplate::strip(text);
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
    const std::string key = Llama2ChatTemplate::strip(text);
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

// The prompt of a dialog: optionally a system message first, then user and
// assistant messages in turn, ending with the user's. Answers the model gave
// come back as the ids it gave them as (`known`, when it has them); `used`
// receives every answer with the ids it was read as.
inline std::vector<TokenId> encode_dialog(const Tokenizer& tok, std::span<const ChatMessage> messages,
                                          const KnownAnswers* known = nullptr, std::vector<DialogAnswer>* used = nullptr) {
  using Role = ChatMessage::Role;
  std::vector<TokenId> ids;
  std::string_view system;
  bool first_turn = true, expect_user = true;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string at = "message " + std::to_string(i);
    if (m.role == Role::System) {
      if (i != 0) throw InputError("chat: " + at + " is a system message; only the first may be");
      system = m.content;
    } else if (m.role == Role::User) {
      if (!expect_user) throw InputError("chat: " + at + " is a second user message in a row");
      const auto turn = Llama2ChatTemplate::encode_user_turn(tok, m.content, first_turn ? system : "");
      ids.insert(ids.end(), turn.begin(), turn.end());
      first_turn = false;
      expect_user = false;
    } else {
      if (expect_user) throw InputError("chat: " + at + " is an answer that does not follow a user message");
      std::optional<std::vector<TokenId>> answer = known ? known->find(m.content) : std::nullopt;
      if (!answer) answer = tok.encode(Llama2ChatTemplate::strip(m.content), false);
      if (used) used->push_back({m.content, *answer});
      Llama2ChatTemplate::close_answer(tok, *answer);
      ids.insert(ids.end(), answer->begin(), answer->end());
      expect_user = true;
    }
  }
  if (first_turn) throw InputError("chat: the dialog has no user message");
  if (expect_user) throw InputError("chat: the last message must be the user's");
  return ids;
}

}  // namespace streamllm
