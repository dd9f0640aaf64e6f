// The OpenAI API's answers as data: replies with a JSON body (every error
// in OpenAI's error object), the chunks of a stream (server-sent events)
// and whole answers of /v1/completions and /v1/chat/completions, usage,
// llama.cpp's timings, logprobs, the model object. The service
// (api_service.hpp) decides what to answer; this is how it looks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "streamllm/core/config.hpp"
#include "streamllm/generation/generation_step.hpp"
#include "streamllm/serve/openai_request.hpp"
#include "streamllm/serve/transport.hpp"
#include "streamllm/text/tokenizer.hpp"

namespace streamllm::openai {

inline json error_body(std::string_view message, int status, std::string_view param = {}, std::string type = {}) {
  if (type.empty()) type = ApiError::default_type(status);
  return {{"error",
           {{"message", std::string(message)},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(std::string(param))},
            {"code", status}}}};
}

// A reply with a JSON body, and one with an error object.
inline serve::HttpReply json_reply(int status, const json& body) {
  return {status, {{"Content-Type", "application/json"}}, dump(body)};
}
inline serve::HttpReply error_reply(int status, std::string_view message, std::string_view param = {}, std::string type = {}) {
  return json_reply(status, error_body(message, status, param, std::move(type)));
}

inline const char* finish_reason(StopReason r) {
  switch (r) {
    case StopReason::EndOfSequence:
    case StopReason::StopToken:
    case StopReason::StopString: return "stop";
    case StopReason::MaxTokens:
    case StopReason::CacheFull: return "length";
    case StopReason::Cancelled: return "cancelled";  // the server stopped it (shutdown)
    case StopReason::Error: return "error";
  }
  return "stop";
}

// A token as the API shows it: its text (a byte piece as "\xNN", since a
// lone byte is not a string), and its bytes.
inline std::string token_text(const Tokenizer& tok, TokenId id) {
  switch (tok.kind(id)) {
    case Tokenizer::Kind::Byte: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", tok.byte_value(id));
      return buf;
    }
    case Tokenizer::Kind::Control: return tok.piece(id);
    default: return tok.surface(id);
  }
}
inline json token_bytes(const Tokenizer& tok, TokenId id) {
  json b = json::array();
  if (tok.kind(id) == Tokenizer::Kind::Byte)
    b.push_back(tok.byte_value(id));
  else if (tok.kind(id) != Tokenizer::Kind::Control)
    for (unsigned char c : tok.surface(id)) b.push_back(c);
  return b;
}

// Chat's logprobs.content entries for these tokens.
inline json chat_logprobs(const Tokenizer& tok, std::span<const TokenLogprob> lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"token", token_text(tok, id)}, {"logprob", lp}, {"bytes", token_bytes(tok, id)}});
    content.push_back(
        {{"token", token_text(tok, t.id)}, {"logprob", t.logprob}, {"bytes", token_bytes(tok, t.id)}, {"top_logprobs", top}});
  }
  return content;
}

// Chat's logprobs object around those entries.
inline json chat_logprobs_object(json content) { return {{"content", std::move(content)}, {"refusal", nullptr}}; }

// The completions endpoint's logprobs: parallel lists, offsets into the text.
struct CompletionLogprobs {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  void add(const Tokenizer& tok, std::span<const TokenLogprob> lps, std::size_t offset) {
    for (const TokenLogprob& t : lps) {
      const std::string s = token_text(tok, t.id);
      tokens.push_back(s);
      token_logprobs.push_back(t.logprob);
      json top = json::object();
      for (const auto& [id, lp] : t.top) top[token_text(tok, id)] = lp;
      top_logprobs.push_back(top);
      text_offset.push_back(offset);
      if (tok.kind(t.id) != Tokenizer::Kind::Byte) offset += tok.surface(t.id).size();
    }
  }
  json to_json() const {
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
  }
};

inline json usage(std::size_t prompt, std::size_t completion, std::size_t cached) {
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

// llama.cpp's `timings`, and the time to first token; `closing_n`: of the
// cached tokens, the previous answer's last ones fed with this prompt.
inline json timings(const GenerationResult& r) {
  const double prompt_ms = 1e3 * r.prefill_s, predicted_ms = 1e3 * r.decode_s;
  return {{"cached_n", r.cached_tokens},
          {"closing_n", r.closing_tokens},
          {"prompt_n", r.prefilled_tokens()},
          {"prompt_ms", prompt_ms},
          {"prompt_per_second", r.prefill_tokens_per_s()},
          {"predicted_n", r.tokens.size()},
          {"predicted_ms", predicted_ms},
          {"predicted_per_second", r.tokens_per_s()},
          {"ttft_ms", 1e3 * r.time_to_first_token_s}};
}

// What a response says of itself, whatever its choices, and the shapes of
// its choices: a stream's chunks (the role first, a piece, the finish, the
// usage), or the whole answer.
struct Envelope {
  std::string id, model;
  std::int64_t created = 0;
  Endpoint endpoint = Endpoint::Completions;
  bool include_usage = false;  // a stream's stream_options.include_usage: every chunk says "usage": null

  bool chat() const { return endpoint == Endpoint::Chat; }
  const char* chunk_object() const { return chat() ? "chat.completion.chunk" : "text_completion"; }

  json chunk(json choice) const {
    json c = {{"id", id},       {"object", chunk_object()},          {"created", created},
              {"model", model}, {"system_fingerprint", "streamllm"}, {"choices", json::array({std::move(choice)})}};
    if (include_usage) c["usage"] = nullptr;
    return c;
  }
  // A chat stream opens each choice with its role, as OpenAI does.
  json role_chunk(std::size_t index) const {
    return chunk({{"index", index},
                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                  {"logprobs", nullptr},
                  {"finish_reason", nullptr}});
  }
  // A piece of choice `index`'s text, with its tokens' logprobs (null: none asked).
  json piece_chunk(std::size_t index, std::string_view text, json logprobs) const {
    json choice = {{"index", index}, {"finish_reason", nullptr}, {"logprobs", std::move(logprobs)}};
    if (chat())
      choice["delta"] = {{"content", std::string(text)}};
    else
      choice["text"] = std::string(text);
    return chunk(std::move(choice));
  }
  json finish_chunk(std::size_t index, StopReason stop) const {
    json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_reason(stop)}};
    if (chat())
      choice["delta"] = json::object();
    else
      choice["text"] = "";
    return chunk(std::move(choice));
  }
  // The last event of a stream that asked for its usage: no choices.
  json usage_chunk(json usage_json, json timings_json) const {
    return {{"id", id},
            {"object", chunk_object()},
            {"created", created},
            {"model", model},
            {"system_fingerprint", "streamllm"},
            {"choices", json::array()},
            {"usage", std::move(usage_json)},
            {"timings", std::move(timings_json)}};
  }

  // One choice of a whole answer (logprobs: null when none were asked).
  json whole_choice(std::size_t index, const std::string& text, StopReason stop, json logprobs) const {
    json choice = {{"index", index}, {"finish_reason", finish_reason(stop)}, {"logprobs", std::move(logprobs)}};
    if (chat())
      choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
    else
      choice["text"] = text;
    return choice;
  }
  json whole(json choices, json usage_json, json timings_json) const {
    return {{"id", id},
            {"object", chat() ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"system_fingerprint", "streamllm"},
            {"choices", std::move(choices)},
            {"usage", std::move(usage_json)},
            {"timings", std::move(timings_json)}};
  }
};

inline std::string sse(const json& event) { return "data: " + dump(event) + "\n\n"; }
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The model object of /v1/models.
inline json model_object(const std::string& name, std::int64_t created, const ModelShape& s, bool sink_window) {
  return {{"id", name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "streamllm"},
          {"meta",
           {{"dim", s.dim},
            {"layers", s.layers},
            {"heads", s.heads},
            {"kv_heads", s.kv_heads},
            {"vocab", s.vocab},
            {"context", s.max_seq},
            {"cache", sink_window ? "sink+window" : "dense"}}}};
}

}  // namespace streamllm::openai
