// What passes between the API service and an HTTP binding: a request
// (method, target, headers, body), a reply (status, headers, body), and for
// generations an Exchange, the reply that arrives piece by piece from the
// scheduler's thread. No JSON and no sockets here: the service
// (api_service.hpp) reads and writes these, a binding (examples/server)
// moves their bytes, and a test can hand them over in memory.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace streamllm::serve {

struct HttpRequest {
  std::string method, target;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;

  std::string_view header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
  std::string_view path() const {
    const std::string_view t = target;
    return t.substr(0, t.find('?'));
  }
};

struct HttpReply {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string_view header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
};

// One generating request: its status line, headers and body as they become
// known. Thread-safe: the scheduler's thread fills it, the binding's drains it.
class Exchange {
 public:
  explicit Exchange(bool streaming) : streaming_(streaming) {}

  bool streaming() const { return streaming_; }

  // Called (from any thread) whenever there is something new to take; when
  // set after output is ready, at once.
  void on_ready(std::function<void()> f) {
    bool now;
    {
      std::lock_guard lock(mu_);
      notify_ = std::move(f);
      now = head_ready_ && (!out_.empty() || finished_);
    }
    if (now) notify_();
  }
  // Status and headers, once known (a stream at once, a whole answer at its end).
  std::optional<HttpReply> head() const {
    std::lock_guard lock(mu_);
    if (!head_ready_) return std::nullopt;
    return head_;
  }
  // Appends the body bytes ready so far to `out`; true when no more will come.
  bool take(std::string& out) {
    std::lock_guard lock(mu_);
    out += out_;
    out_.clear();
    return finished_;
  }
  // The client has gone (or the server ends the stream): cancels the sequences.
  void cancel() {
    std::function<void()> c;
    {
      std::lock_guard lock(mu_);
      c = cancel_;
    }
    if (c) c();
  }

  // The service's side.
  void set_head(HttpReply h) {
    std::lock_guard lock(mu_);
    head_ = std::move(h);
    head_ready_ = true;
  }
  void set_cancel(std::function<void()> c) {
    std::lock_guard lock(mu_);
    cancel_ = std::move(c);
  }
  // Appends body bytes (and with `last`, ends it; `head` replaces the status line).
  void write(std::string_view data, bool last = false, std::optional<HttpReply> head = std::nullopt) {
    std::function<void()> n;
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      out_ += data;
      if (head) {
        head_ = std::move(*head);
        head_ready_ = true;
      }
      finished_ = last;
      if (head_ready_) n = notify_;
    }
    if (n) n();
  }

 private:
  const bool streaming_;
  mutable std::mutex mu_;
  HttpReply head_;
  bool head_ready_ = false, finished_ = false;
  std::string out_;
  std::function<void()> notify_, cancel_;
};

}  // namespace streamllm::serve
