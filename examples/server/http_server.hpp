// The HTTP binding of the API service: Boost.Beast over Asio, a fixed number
// of I/O threads however many clients connect. Each connection reads one
// request under a whole-request deadline (a client that sends a byte a
// second cannot hold it), bodies are bounded (413), requests on one
// connection are answered in order (pipelining), generations stream as
// chunked server-sent events or arrive whole, and a client that goes away
// cancels its sequences. Everything the API means lives in the library
// (streamllm/serve/api_service.hpp); this file only moves bytes.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "streamllm/serve/api_service.hpp"
#include "streamllm/serve/openai_response.hpp"
#include "streamllm/serve/transport.hpp"

namespace server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using streamllm::serve::Exchange;
using streamllm::serve::HttpReply;
using streamllm::serve::HttpRequest;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int io_threads = 2;
  std::size_t max_body_bytes = std::size_t(4) << 20;
  std::size_t max_header_bytes = std::size_t(16) << 10;
  std::chrono::milliseconds request_timeout{10000};  // from the wait for a request to its last byte
  std::size_t max_connections = 512;
};

// `Service` answers HttpRequests: ApiService, or anything with its handle()
// and unavailable() (the reply to a request it cannot take at all).
template <class Service>
class HttpServer {
 public:
  // The acceptor has a strand of its own: close_listener() runs on it, so a
  // close never meets an accept's completion on another I/O thread (which
  // would re-arm an acceptor being torn down).
  HttpServer(Service& service, HttpOptions opt)
      : service_(&service), opt_(std::move(opt)), acceptor_(net::make_strand(ioc_)) {}
  ~HttpServer() { stop(); }

  // Binds and listens; returns the port.
  int bind() {
    const auto addr = net::ip::make_address(opt_.host);
    const tcp::endpoint ep(addr, static_cast<unsigned short>(opt_.port));
    acceptor_.open(ep.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen(1024);
    return acceptor_.local_endpoint().port();
  }

  // Serves on the I/O threads until stop(); blocks.
  void run() {
    accept();
    std::vector<std::thread> extra;
    for (int i = 1; i < opt_.io_threads; ++i) extra.emplace_back([this] { ioc_.run(); });
    ioc_.run();
    for (auto& t : extra) t.join();
  }

  // Stops accepting: the requests in progress go on until stop().
  void close_listener() {
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
  }
  // Waits until no answer is being written (or the time is up).
  void wait_idle(std::chrono::milliseconds limit) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (busy_ > 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  void stop() { ioc_.stop(); }
  bool running() const { return !ioc_.stopped(); }

 private:
  class Session;

  // A whole reply as Beast writes it.
  static http::response<http::string_body> response(HttpReply r) {
    http::response<http::string_body> res(static_cast<http::status>(r.status), 11);
    res.set(http::field::server, "streamllm");
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.body() = std::move(r.body);
    res.prepare_payload();
    return res;
  }

  // Completes on the acceptor's strand; the new socket gets a strand of its own.
  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (acceptor_.is_open()) accept();
        return;
      }
      if (connections_ >= opt_.max_connections) {  // answered at once, not held
        beast::error_code ignored;
        auto busy = response(service_->unavailable("too many connections"));
        busy.keep_alive(false);
        http::write(socket, busy, ignored);
        socket.shutdown(tcp::socket::shutdown_both, ignored);
      } else {
        std::make_shared<Session>(*this, std::move(socket))->start();
      }
      accept();
    });
  }

  class Session : public std::enable_shared_from_this<Session> {
   public:
    Session(HttpServer& srv, tcp::socket socket) : srv_(srv), stream_(std::move(socket)), poll_(stream_.get_executor()) {
      ++srv_.connections_;
    }
    ~Session() { --srv_.connections_; }

    void start() {
      net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->read(); });
    }

   private:
    void read() {
      parser_.emplace();
      parser_->body_limit(srv_.opt_.max_body_bytes);
      parser_->header_limit(static_cast<std::uint32_t>(srv_.opt_.max_header_bytes));
      stream_.expires_after(srv_.opt_.request_timeout);  // one deadline for the whole request
      http::async_read(stream_, buffer_, *parser_,
                       [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
    }

    void on_read(beast::error_code ec) {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted) return close();
      if (ec) {
        keep_alive_ = false;
        if (ec == http::error::body_limit)
          return write_whole(streamllm::openai::error_reply(
              413,
              "the body is larger than the limit of " + std::to_string(srv_.opt_.max_body_bytes) + " bytes (--max-body-mib)"));
        if (ec == http::error::header_limit)
          return write_whole(streamllm::openai::error_reply(
              431, "the request's headers are larger than " + std::to_string(srv_.opt_.max_header_bytes) + " bytes"));
        return write_whole(streamllm::openai::error_reply(400, "malformed HTTP request: " + ec.message()));
      }
      stream_.expires_never();
      auto& msg = parser_->get();
      keep_alive_ = msg.keep_alive();
      HttpRequest req;
      req.method = std::string(msg.method_string());
      req.target = std::string(msg.target());
      for (const auto& f : msg) {
        std::string name(f.name_string());
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        req.headers.emplace_back(std::move(name), std::string(f.value()));
      }
      req.body = std::move(msg.body());
      auto handled = srv_.service_->handle(req);
      if (!handled.exchange) return write_whole(std::move(handled.reply));
      ++srv_.busy_;
      exchange_ = std::move(handled.exchange);
      std::weak_ptr<Session> weak = this->shared_from_this();
      exchange_->on_ready([weak, ex = stream_.get_executor()] {
        net::post(ex, [weak] {
          if (auto self = weak.lock()) self->flush();
        });
      });
      watch_client();
    }

    // A client that has gone (its socket closed) cancels its sequences:
    // checked every 200 ms without reading what it may have pipelined.
    void watch_client() {
      poll_.expires_after(std::chrono::milliseconds(200));
      poll_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
        if (ec || !self->exchange_) return;
        char byte;
        const auto n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          self->exchange_->cancel();
          self->gone_ = true;
        }
        self->watch_client();
      });
    }

    // Writes what the exchange has ready; one write at a time.
    void flush() {
      if (writing_ || !exchange_) return;
      const auto head = exchange_->head();
      if (!head) return;
      if (!exchange_->streaming()) {
        std::string body;
        if (!exchange_->take(body)) return;  // a whole answer is written when complete
        HttpReply r = *head;
        r.body = std::move(body);
        end_exchange();
        return write_whole(std::move(r));
      }
      if (!header_sent_) return write_stream_header(*head);
      std::string data;
      const bool last = exchange_->take(data);
      if (data.empty() && !last) return;
      writing_ = true;
      auto owned = std::make_shared<std::string>(std::move(data));
      auto chunk = std::make_shared<http::chunk_body<net::const_buffer>>(
          http::make_chunk(net::const_buffer(owned->data(), owned->size())));
      auto end = std::make_shared<http::chunk_last<>>(http::make_chunk_last());
      auto done = [self = this->shared_from_this(), owned, chunk, end, last](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        if (ec) {
          self->exchange_->cancel();  // the client is gone
          self->end_exchange();
          return self->close();
        }
        if (!last) return self->flush();
        self->end_exchange();
        if (self->keep_alive_ && !self->gone_) return self->read();
        self->close();
      };
      if (!last)
        net::async_write(stream_, *chunk, done);
      else if (owned->empty())
        net::async_write(stream_, *end, done);
      else
        net::async_write(stream_, beast::buffers_cat(*chunk, *end), done);
    }

    void write_stream_header(const HttpReply& head) {
      writing_ = true;
      auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
      res->set(http::field::server, "streamllm");
      for (const auto& [k, v] : head.headers) res->set(k, v);
      res->chunked(true);
      res->keep_alive(keep_alive_);
      auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
      http::async_write_header(stream_, *sr, [self = this->shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        self->header_sent_ = true;
        if (ec) {
          self->exchange_->cancel();
          self->end_exchange();
          return self->close();
        }
        self->flush();
      });
    }

    void write_whole(HttpReply r) {
      auto res = std::make_shared<http::response<http::string_body>>(response(std::move(r)));
      res->keep_alive(keep_alive_ && !gone_);
      writing_ = true;
      http::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
        self->writing_ = false;
        if (ec || !res->keep_alive()) return self->close();
        self->read();  // the next request, pipelined or not
      });
    }

    void end_exchange() {
      if (!exchange_) return;
      exchange_.reset();
      header_sent_ = false;
      poll_.cancel();
      --srv_.busy_;
    }

    void close() {
      end_exchange();
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      stream_.close();
    }

    HttpServer& srv_;
    beast::tcp_stream stream_;
    net::steady_timer poll_;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::shared_ptr<Exchange> exchange_;
    bool keep_alive_ = true, writing_ = false, header_sent_ = false, gone_ = false;
  };

  Service* service_;
  HttpOptions opt_;
  // Before the context: sessions still queued in it count themselves out
  // when it is destroyed.
  std::atomic<std::size_t> connections_ = 0;
  std::atomic<int> busy_ = 0;  // exchanges being answered
  net::io_context ioc_;
  tcp::acceptor acceptor_;
};

}  // namespace server
