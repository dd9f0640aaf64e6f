// An OpenAI-style HTTP server over the batch scheduler: POST /v1/completions
// and /v1/chat/completions (streamed as server-sent events, one event per
// piece of text, then [DONE]; or whole), GET /health. Every request becomes a
// sequence in the scheduler; a client that disconnects cancels it. Bad
// requests get a 4xx answer with a JSON error body; the server keeps serving.
#pragma once

// streamllm (Eigen) first: httplib pulls in <resolv.h>, whose `_res` macro
// breaks Eigen's headers when they come after it.
#include "streamllm/streamllm.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace server {

using json = nlohmann::json;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;                // 0: any free port
  std::size_t max_sequences = 8;  // in the batch at once
  std::size_t max_waiting = 64;   // queued behind them; more get 429
  std::size_t step_tokens = 256;
  std::int64_t sinks = 4, window = 0;  // window 0: a dense cache per request
  int default_max_tokens = 256;
  std::string model_name = "streamllm";
};

// A request the client got wrong: answered with `status` and the message.
struct BadRequest {
  int status;
  std::string message;
};

// What a handler thread waits on while the scheduler thread generates.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  std::optional<streamllm::Completion> done;
};

// Field readers that reject the wrong type with the field's name.
inline const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}
inline double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw BadRequest{400, std::string("'") + name + "' must be a number"};
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    throw BadRequest{400, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi)};
  return x;
}
inline std::int64_t integer(const json& body, const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw BadRequest{400, std::string("'") + name + "' must be an integer"};
  const auto x = v->get<std::int64_t>();
  if (x < lo || x > hi)
    throw BadRequest{400, std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi)};
  return x;
}
inline bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw BadRequest{400, std::string("'") + name + "' must be true or false"};
  return v->get<bool>();
}
inline std::string text(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) throw BadRequest{400, std::string("'") + name + "' is required"};
  if (!v->is_string()) throw BadRequest{400, std::string("'") + name + "' must be a string"};
  return v->get<std::string>();
}

// A POST whose response body is handed to on_data as it arrives (return
// false to hang up): what a streaming client does. For tests and the load
// generator.
inline httplib::Result post_streaming(httplib::Client& client, const std::string& path, const std::string& body,
                                      std::function<bool(const char*, std::size_t)> on_data) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [on_data = std::move(on_data)](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    return on_data(data, n);
  };
  return client.send(req);
}

inline json error_body(const std::string& message, int status) {
  return {{"error", {{"message", message}, {"type", status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error"}, {"code", status}}}};
}

inline const char* finish_reason(const streamllm::Completion& c) {
  return c.stop == streamllm::StopReason::MaxTokens || c.stop == streamllm::StopReason::CacheFull ? "length" : "stop";
}

template <class Config>
class CompletionServer {
 public:
  CompletionServer(streamllm::Llama<Config>& model, const streamllm::Tokenizer& tok, Options opt)
      : model_(&model), tok_(&tok), opt_(std::move(opt)),
        scheduler_(model, tok, {opt_.max_sequences, opt_.max_waiting, opt_.step_tokens}) {
    if (opt_.window > 0)  // checked once, so that requests cannot fail on it
      streamllm::DynamicSinkWindowKVCache<Config> probe(opt_.sinks, opt_.window);
    // Every connection holds a thread while it streams: allow many.
    http_.new_task_queue = [n = opt_.max_sequences + opt_.max_waiting + 8] { return new httplib::ThreadPool(n); };
    // Remember the listening socket, to widen its accept queue after bind:
    // the library listens with a backlog of 5, and a burst of clients
    // connecting at once overflows it.
    http_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_socket_ = sock;
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(json{{"status", "ok"}, {"model", opt_.model_name}, {"active_sequences", scheduler_.active()},
                           {"waiting_sequences", scheduler_.waiting()}}.dump(),
                      "application/json");
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
  }

  ~CompletionServer() { stop(); }

  // Binds (port 0: any free one) and returns the port.
  int bind() {
    const int port = opt_.port == 0 ? http_.bind_to_any_port(opt_.host) : (http_.bind_to_port(opt_.host, opt_.port) ? opt_.port : -1);
    if (port < 0) throw streamllm::Error("server: cannot listen on " + opt_.host + ":" + std::to_string(opt_.port));
    if (listen_socket_ >= 0) ::listen(listen_socket_, 1024);
    return port;
  }
  // Serves until stop(); call after bind().
  void serve() {
    scheduler_.start();
    http_.listen_after_bind();
  }
  void stop() {
    http_.stop();
    scheduler_.stop();
  }
  bool running() const { return http_.is_running(); }

 private:
  struct Prepared {
    std::vector<streamllm::TokenId> prompt;
    streamllm::GenerationOptions gen;
    bool stream = false;
  };

  // The prompt tokens of a request, and its sampling options.
  Prepared prepare(const json& body, bool chat) const {
    if (!body.is_object()) throw BadRequest{400, "the request body must be a JSON object"};
    Prepared p;
    p.stream = boolean(body, "stream", false);
    p.gen.max_new_tokens = static_cast<int>(integer(body, "max_tokens", opt_.default_max_tokens, 1, 1 << 20));
    p.gen.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 100.0));
    p.gen.sampling.top_p = static_cast<float>(number(body, "top_p", 1.0, 1e-9, 1.0));
    p.gen.sampling.top_k = static_cast<int>(integer(body, "top_k", 0, 0, Config::Vocab));
    p.gen.sampling.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 1e-3, 100.0));
    p.gen.sampling.seed = static_cast<std::uint64_t>(integer(body, "seed", 0, 0, std::numeric_limits<std::int64_t>::max()));
    p.gen.stop_at_eos = !boolean(body, "ignore_eos", false);  // llama.cpp's server has it too
    if (integer(body, "n", 1, 1, 1) != 1) throw BadRequest{400, "'n' must be 1"};
    if (chat) {
      p.gen.continue_text = false;  // the answer is a text of its own
      const json* msgs = field(body, "messages");
      if (!msgs || !msgs->is_array() || msgs->empty()) throw BadRequest{400, "'messages' must be a non-empty array"};
      std::string system;
      std::vector<std::pair<std::string, std::string>> turns;  // (user, assistant)
      for (std::size_t i = 0; i < msgs->size(); ++i) {
        const json& m = (*msgs)[i];
        if (!m.is_object()) throw BadRequest{400, "each message must be an object"};
        const std::string role = text(m, "role"), content = text(m, "content");
        if (role == "system" && i == 0) {
          system = content;
        } else if (role == "user") {
          if (!turns.empty() && turns.back().second.empty() && i > 0) throw BadRequest{400, "two user messages in a row"};
          turns.push_back({content, ""});
        } else if (role == "assistant") {
          if (turns.empty() || !turns.back().second.empty()) throw BadRequest{400, "an assistant message must follow a user message"};
          turns.back().second = content;
        } else {
          throw BadRequest{400, "unknown role '" + role + "' (system first, then user and assistant)"};
        }
      }
      if (turns.empty() || !turns.back().second.empty()) throw BadRequest{400, "the last message must be the user's"};
      // Meta's format: BOS [INST] user [/INST] answer EOS ..., BOS [INST] last [/INST]
      for (std::size_t i = 0; i < turns.size(); ++i) {
        std::string t = streamllm::Llama2ChatTemplate::user_turn(turns[i].first, i == 0 ? system : "");
        const bool last = i + 1 == turns.size();
        if (!last) t += " " + streamllm::Llama2ChatTemplate::strip(turns[i].second) + " ";
        p.prompt.push_back(tok_->bos());
        const auto ids = tok_->encode(t, false);
        p.prompt.insert(p.prompt.end(), ids.begin(), ids.end());
        if (!last) p.prompt.push_back(tok_->eos());
      }
    } else {
      p.prompt = tok_->encode(text(body, "prompt"), true);
    }
    if (static_cast<std::int64_t>(p.prompt.size()) >= Config::MaxSeq && opt_.window == 0)
      throw BadRequest{400, "the prompt has " + std::to_string(p.prompt.size()) + " tokens; the context holds " +
                                std::to_string(Config::MaxSeq)};
    return p;
  }

  // A dense cache holds what the request can use (prompt + max_tokens, at
  // most MaxSeq), not MaxSeq: for a 1B model that is 2-90 MB per request to
  // allocate and fault in.
  std::unique_ptr<streamllm::KVCacheBase<Config>> new_cache(std::size_t prompt_tokens, int max_tokens) const {
    if (opt_.window > 0) return std::make_unique<streamllm::DynamicSinkWindowKVCache<Config>>(opt_.sinks, opt_.window);
    const auto need = static_cast<std::int64_t>(prompt_tokens) + max_tokens;
    return std::make_unique<streamllm::KVCache<Config>>(std::min<std::int64_t>(Config::MaxSeq, need));
  }

  json chunk(const std::string& id, bool chat, const std::string& piece, const char* finish, bool first) const {
    json choice = {{"index", 0}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    if (chat) {
      json delta = json::object();
      if (first) delta["role"] = "assistant";
      if (!piece.empty()) delta["content"] = piece;
      choice["delta"] = delta;
    } else {
      choice["text"] = piece;
    }
    return {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", now()},
            {"model", opt_.model_name}, {"choices", json::array({choice})}};
  }

  static std::int64_t now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    Prepared p;
    try {
      json body;
      try {
        body = json::parse(req.body);
      } catch (const json::exception& e) {
        throw BadRequest{400, std::string("the body is not valid JSON: ") + e.what()};
      }
      p = prepare(body, chat);
    } catch (const BadRequest& e) {
      res.status = e.status;
      res.set_content(error_body(e.message, e.status).dump(), "application/json");
      return;
    } catch (const streamllm::Error& e) {
      res.status = 400;
      res.set_content(error_body(e.what(), 400).dump(), "application/json");
      return;
    }

    auto stream = std::make_shared<Stream>();
    typename streamllm::BatchScheduler<Config>::Request r;
    const std::size_t prompt_tokens = p.prompt.size();
    r.prompt = std::move(p.prompt);
    r.cache = new_cache(prompt_tokens, p.gen.max_new_tokens);
    r.options = p.gen;
    r.on_text = [stream](std::string_view piece) {
      std::lock_guard lock(stream->mu);
      stream->pieces.emplace_back(piece);
      stream->cv.notify_all();
      return true;
    };
    r.on_done = [stream](const streamllm::Completion& c) {
      std::lock_guard lock(stream->mu);
      stream->done = c;
      stream->cv.notify_all();
    };
    streamllm::SequenceId seq = 0;
    try {
      seq = scheduler_.submit(std::move(r));
    } catch (const streamllm::CapacityError& e) {
      res.status = 429;
      res.set_content(error_body(e.what(), 429).dump(), "application/json");
      return;
    } catch (const streamllm::Error& e) {
      res.status = 400;
      res.set_content(error_body(e.what(), 400).dump(), "application/json");
      return;
    }
    const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(seq);

    if (!p.stream) {
      // The answer is written when complete; meanwhile a space (JSON allows
      // leading whitespace) goes out every 200 ms, so that a client that has
      // gone away is noticed (the write fails) and its sequence cancelled.
      res.set_chunked_content_provider(
          "application/json",
          [this, stream, seq, id, chat, prompt_tokens](std::size_t, httplib::DataSink& sink) {
            std::unique_lock lock(stream->mu);
            if (!stream->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return stream->done.has_value(); })) {
              if (!sink.write(" ", 1)) {
                scheduler_.cancel(seq);
                return false;
              }
              return true;
            }
            const streamllm::Completion& c = *stream->done;
            json choice = {{"index", 0}, {"finish_reason", finish_reason(c)}};
            if (chat)
              choice["message"] = {{"role", "assistant"}, {"content", c.text}};
            else
              choice["text"] = c.text;
            json answer = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", now()},
                           {"model", opt_.model_name}, {"choices", json::array({choice})},
                           {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", c.tokens.size()},
                                      {"total_tokens", prompt_tokens + c.tokens.size()}}}};
            if (!c.error.empty()) answer["error"] = error_body(c.error, 500)["error"];  // headers are gone: say it in the body
            const std::string out = answer.dump();
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          },
          [this, seq](bool success) {
            if (!success) scheduler_.cancel(seq);
          });
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream, seq, id, chat, first = true](std::size_t, httplib::DataSink& sink) mutable {
          std::unique_lock lock(stream->mu);
          stream->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !stream->pieces.empty() || stream->done; });
          while (!stream->pieces.empty()) {
            const std::string event = "data: " + chunk(id, chat, stream->pieces.front(), nullptr, first).dump() + "\n\n";
            stream->pieces.pop_front();
            first = false;
            if (!sink.write(event.data(), event.size())) {
              scheduler_.cancel(seq);  // the client is gone
              return false;
            }
          }
          if (stream->done) {
            std::string end;
            if (!stream->done->error.empty())  // the sequence failed mid-stream: an error event before the end
              end = "data: " + error_body(stream->done->error, 500).dump() + "\n\n";
            end += "data: " + chunk(id, chat, "", finish_reason(*stream->done), first).dump() + "\n\ndata: [DONE]\n\n";
            sink.write(end.data(), end.size());
            sink.done();
            return true;
          }
          if (!sink.is_writable()) {
            scheduler_.cancel(seq);
            return false;
          }
          return true;
        },
        [this, seq](bool success) {
          if (!success) scheduler_.cancel(seq);
        });
  }

  streamllm::Llama<Config>* model_;
  const streamllm::Tokenizer* tok_;
  Options opt_;
  streamllm::BatchScheduler<Config> scheduler_;
  httplib::Server http_;
  socket_t listen_socket_ = -1;
};

}  // namespace server
