// The OpenAI API's requests as data: a request's JSON to prompts and
// generation options, for /v1/completions and /v1/chat/completions, every
// field range-checked (a 400 naming it). The answers' format is
// openai_response.hpp; the service (api_service.hpp) routes, a binding
// (examples/server) moves bytes.
//
// Where the API is silent we follow llama.cpp's server: `top_k`,
// `repetition_penalty` (or `repeat_penalty`), `ignore_eos`, a `timings`
// object. Fields that would change the output and that we do not support
// (tools, a response_format other than text, ...) are a 400 naming them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streamllm/core/error.hpp"
#include "streamllm/generation/generation_step.hpp"
#include "streamllm/text/chat_template.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm::openai {

using json = nlohmann::json;

// A request the API refuses: its HTTP status, OpenAI's error type, the field.
class ApiError : public InputError {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = {})
      : InputError(message),
        status_(status),
        param_(std::move(param)),
        type_(type.empty() ? default_type(status) : std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }

  static std::string default_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
  }

 private:
  int status_;
  std::string param_, type_;
};

// Text as JSON: bytes that are not UTF-8 (a model can emit any) are replaced,
// never a reason to fail a response.
inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

enum class Endpoint { Completions, Chat };

struct Limits {
  int vocab = 0;
  std::int64_t context = 0;  // tokens a dense cache holds; 0: unbounded (sink+window)
  int default_max_tokens = 256;
  int max_n = 16;  // choices per prompt
  std::size_t max_prompts = 16;
  std::size_t max_prompt_bytes = 0;  // of the prompt's text, checked before tokenising; 0: no limit
};

struct Request {
  Endpoint endpoint = Endpoint::Completions;
  std::vector<std::vector<TokenId>> prompts;  // completions: one per prompt; chat: the dialog
  int n = 1;                                  // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  GenerationOptions options;
  std::optional<std::uint64_t> seed;  // none: a fresh one per request
  bool logprobs = false;
  int top_logprobs = 0;
  std::vector<DialogAnswer> answers;  // chat: the dialog's answers, as read
  std::size_t choices() const { return prompts.size() * static_cast<std::size_t>(n); }
};

// ---- reading fields ---------------------------------------------------------

namespace detail {

inline const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}
inline std::string quoted(const char* name) { return std::string("'") + name + "'"; }

inline double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw ApiError(400, quoted(name) + " must be a number", name);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw ApiError(400, quoted(name) + " is " + dump(*v) + ", it must be between " + dump(lo) + " and " + dump(hi), name);
  return x;
}
inline std::int64_t integer(const json& body, const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw ApiError(400, quoted(name) + " must be an integer", name);
  if (v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    throw ApiError(400, quoted(name) + " is " + dump(*v) + ", at most " + std::to_string(hi), name);
  const auto x = v->get<std::int64_t>();
  if (x < lo || x > hi)
    throw ApiError(
        400,
        quoted(name) + " is " + std::to_string(x) + ", it must be between " + std::to_string(lo) + " and " + std::to_string(hi),
        name);
  return x;
}
inline bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw ApiError(400, quoted(name) + " must be true or false", name);
  return v->get<bool>();
}

// Fields that would change the output, which we do not do: refused, not ignored.
inline void refuse_unsupported(const json& body, Endpoint ep) {
  for (const char* name : {"tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "audio", "prediction",
                           "web_search_options", "reasoning_effort"}) {
    const json* v = field(body, name);
    if (v && !(v->is_array() && v->empty()))
      throw ApiError(400, quoted(name) + " is not supported by this server (no tool calls, audio or predicted outputs)", name);
  }
  if (const json* rf = field(body, "response_format")) {
    const json* type = rf->is_object() ? field(*rf, "type") : nullptr;
    if (!type || *type != "text")
      throw ApiError(400, "'response_format' other than {\"type\": \"text\"} is not supported (no JSON mode or schemas)",
                     "response_format");
  }
  if (const json* m = field(body, "modalities"); m && *m != json::array({"text"}))
    throw ApiError(400, "'modalities' other than [\"text\"] is not supported", "modalities");
  if (ep == Endpoint::Completions) {
    if (const json* s = field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
      throw ApiError(400, "'suffix' (insertion) is not supported", "suffix");
  }
}

inline void check_prompt_bytes(std::size_t bytes, const Limits& lim, const char* name) {
  if (lim.max_prompt_bytes > 0 && bytes > lim.max_prompt_bytes)
    throw ApiError(400,
                   quoted(name) + " is " + std::to_string(bytes) + " bytes; a prompt of more than " +
                       std::to_string(lim.max_prompt_bytes) + " bytes cannot fit the context of " + std::to_string(lim.context) +
                       " tokens",
                   name);
}

inline std::vector<TokenId> token_array(const json& a, const Limits& lim, const char* name) {
  if (a.empty()) throw ApiError(400, quoted(name) + " holds an empty list of tokens", name);
  std::vector<TokenId> ids;
  ids.reserve(a.size());
  for (const json& t : a) {
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= lim.vocab)
      throw ApiError(400, quoted(name) + " holds " + dump(t) + ", not a token id in [0, " + std::to_string(lim.vocab) + ")",
                     name);
    ids.push_back(static_cast<TokenId>(t.get<std::int64_t>()));
  }
  return ids;
}

// `prompt`: a string, an array of strings, an array of token ids, or an
// array of arrays of token ids (OpenAI's four forms).
inline std::vector<std::vector<TokenId>> prompts(const json& body, const Tokenizer& tok, const Limits& lim) {
  const json* p = field(body, "prompt");
  if (!p) throw ApiError(400, "'prompt' is required", "prompt");
  auto text = [&](const json& s) {
    check_prompt_bytes(s.get_ref<const std::string&>().size(), lim, "prompt");
    return tok.encode(s.get_ref<const std::string&>(), true);
  };
  if (p->is_string()) return {text(*p)};
  if (!p->is_array() || p->empty())
    throw ApiError(400, "'prompt' must be a string, or a non-empty array of strings or of token ids", "prompt");
  if ((*p)[0].is_number()) return {token_array(*p, lim, "prompt")};
  if (p->size() > lim.max_prompts)
    throw ApiError(400, "'prompt' holds " + std::to_string(p->size()) + " prompts, at most " + std::to_string(lim.max_prompts),
                   "prompt");
  std::vector<std::vector<TokenId>> out;
  for (const json& e : *p) {
    if (e.is_string())
      out.push_back(text(e));
    else if (e.is_array())
      out.push_back(token_array(e, lim, "prompt"));
    else
      throw ApiError(400, "'prompt' must hold only strings or only arrays of token ids", "prompt");
  }
  return out;
}

// A message's content: a string, null (an assistant's), or parts of type text.
inline std::string content(const json& m, std::size_t i, bool assistant) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (assistant) return {};
    throw ApiError(400, "'" + where + "' is required", where);
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) throw ApiError(400, "'" + where + "' must be a string or an array of content parts", where);
  std::string out;
  for (std::size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* t = part.is_object() ? field(part, "text") : nullptr;
    if (!type || *type != "text" || !t || !t->is_string())
      throw ApiError(400,
                     "'" + where + "[" + std::to_string(k) + "]' is " +
                         (type && type->is_string() ? "a part of type '" + type->get<std::string>() + "'" : "not a text part") +
                         "; only {\"type\": \"text\", \"text\": ...} parts are supported",
                     where);
    if (!out.empty()) out += "\n";
    out += t->get<std::string>();
  }
  return out;
}

inline std::vector<ChatMessage> messages(const json& body, const Limits& lim) {
  const json* msgs = field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->empty()) throw ApiError(400, "'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> out;
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw ApiError(400, "'" + where + "' must be an object", where);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw ApiError(400, "'" + where + ".role' is required", where + ".role");
    const std::string r = role->get<std::string>();
    ChatMessage::Role kind;
    if (r == "system" || r == "developer")
      kind = ChatMessage::Role::System;  // developer: OpenAI's newer name
    else if (r == "user")
      kind = ChatMessage::Role::User;
    else if (r == "assistant")
      kind = ChatMessage::Role::Assistant;
    else
      throw ApiError(400,
                     "'" + where + ".role' is '" + r + "'; the roles are system (or developer), user and assistant" +
                         (r == "tool" || r == "function" ? " (no tool calls)" : ""),
                     where + ".role");
    if (kind == ChatMessage::Role::Assistant && field(m, "tool_calls"))
      throw ApiError(400, "'" + where + ".tool_calls' is not supported", where + ".tool_calls");
    out.push_back({kind, content(m, i, kind == ChatMessage::Role::Assistant)});
    bytes += out.back().content.size();
  }
  check_prompt_bytes(bytes, lim, "messages");
  return out;
}

inline std::vector<std::string> stop_strings(const json& body) {
  const json* s = field(body, "stop");
  if (!s) return {};
  std::vector<std::string> out;
  auto add = [&](const json& v) {
    if (!v.is_string() || v.get<std::string>().empty()) throw ApiError(400, "'stop' must hold non-empty strings", "stop");
    out.push_back(v.get<std::string>());
  };
  if (s->is_string())
    add(*s);
  else if (s->is_array())
    for (const json& v : *s) add(v);
  else
    throw ApiError(400, "'stop' must be a string or an array of up to 4 strings", "stop");
  if (out.size() > StopStrings::kMaxStrings)
    throw ApiError(400, "'stop' holds " + std::to_string(out.size()) + " strings, at most 4", "stop");
  return out;
}

inline std::vector<std::pair<TokenId, float>> logit_bias(const json& body, int vocab) {
  const json* b = field(body, "logit_bias");
  if (!b) return {};
  if (!b->is_object()) throw ApiError(400, "'logit_bias' must map token ids to numbers", "logit_bias");
  std::vector<std::pair<TokenId, float>> out;
  for (const auto& [key, value] : b->items()) {
    std::size_t used = 0;
    long id = -1;
    try {
      id = std::stol(key, &used);
    } catch (const std::exception&) {}
    if (used != key.size() || id < 0 || id >= vocab)
      throw ApiError(400, "'logit_bias' names '" + key + "', not a token id in [0, " + std::to_string(vocab) + ")", "logit_bias");
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
      throw ApiError(400, "'logit_bias' of token " + key + " must be a number in [-100, 100]", "logit_bias");
    out.emplace_back(static_cast<TokenId>(id), value.get<float>());
  }
  return out;
}

}  // namespace detail

// Reads a request body. Chat answers the model gave come back as the ids it
// gave them as when `known` has them.
inline Request parse_request(const json& body, Endpoint ep, const Tokenizer& tok, const ChatTemplate& chat_template,
                             const Limits& lim, const KnownAnswers* known = nullptr) {
  using namespace detail;
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  refuse_unsupported(body, ep);
  Request r;
  r.endpoint = ep;
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  GenerationOptions& g = r.options;
  const char* max_name = ep == Endpoint::Chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  g.max_new_tokens = static_cast<int>(integer(body, max_name, lim.default_max_tokens, 1, 1 << 30));
  g.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  g.sampling.top_p = static_cast<float>(number(body, "top_p", 1.0, 1e-9, 1.0));
  g.sampling.top_k = static_cast<int>(integer(body, "top_k", 0, 0, lim.vocab));
  const char* rep = field(body, "repeat_penalty") ? "repeat_penalty" : "repetition_penalty";
  g.sampling.repetition_penalty = static_cast<float>(number(body, rep, 1.0, 1e-3, 100.0));
  g.sampling.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  g.sampling.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  g.sampling.logit_bias = logit_bias(body, lim.vocab);
  if (field(body, "seed"))
    r.seed = static_cast<std::uint64_t>(
        integer(body, "seed", 0, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
  g.stop_at_eos = !boolean(body, "ignore_eos", false);
  g.stop_strings = stop_strings(body);
  r.n = static_cast<int>(integer(body, "n", 1, 1, lim.max_n));
  if (ep == Endpoint::Completions) {
    if (const json* best = field(body, "best_of"); best && integer(body, "best_of", 1, 1, lim.max_n) != r.n)
      throw ApiError(400, "'best_of' other than 'n' is not supported", "best_of");
    const int lp = static_cast<int>(integer(body, "logprobs", -1, 0, 5));
    r.logprobs = lp >= 0;
    r.top_logprobs = std::max(lp, 0);
    g.echo_prompt = boolean(body, "echo", false);
    r.prompts = prompts(body, tok, lim);
  } else {
    r.logprobs = boolean(body, "logprobs", false);
    r.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
    if (r.top_logprobs > 0 && !r.logprobs) throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
    g.continue_text = false;  // the answer is a text of its own
    const auto msgs = messages(body, lim);
    try {
      r.prompts = {encode_dialog(tok, chat_template, msgs, known, &r.answers)};
    } catch (const ApiError&) {
      throw;
    } catch (const InputError& e) {
      throw ApiError(400, e.what(), "messages");
    }
  }
  if (r.logprobs) g.logprobs = r.top_logprobs;
  if (r.choices() > static_cast<std::size_t>(lim.max_n) * lim.max_prompts)
    throw ApiError(400, "the request asks for " + std::to_string(r.choices()) + " choices", "n");
  for (const auto& p : r.prompts)
    if (lim.context > 0 && static_cast<std::int64_t>(p.size()) >= lim.context)
      throw ApiError(400,
                     "the prompt has " + std::to_string(p.size()) + " tokens; the context holds " + std::to_string(lim.context) +
                         " (one more is needed for the answer)",
                     ep == Endpoint::Chat ? "messages" : "prompt");
  try {
    g.sampling.validate();
  } catch (const InputError& e) {
    throw ApiError(400, e.what());
  }
  return r;
}

}  // namespace streamllm::openai
