// The example server as a user runs it: a child process on a free loopback
// port (it prints the port it got), stopped with SIGTERM. And the small raw
// socket client the abuse tests need (slow senders, pipelining, bodies).
#pragma once

// streamllm (Eigen) first: httplib pulls in <resolv.h>, whose `_res` macro
// breaks Eigen's headers when they come after it.
#include "common.hpp"

#include <algorithm>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace test {

class ServerProcess {
 public:
  // `launcher`: what starts the server, e.g. {"mpirun", "-np", "2"} (empty: itself).
  // `model`: the model's arguments (empty: stories260K and its tokenizer).
  explicit ServerProcess(std::vector<std::string> args, const std::vector<std::string>& launcher = {},
                         std::vector<std::string> model = {}) {
    if (model.empty()) model = {"--model", model_path("stories260K.bin"), "--tokenizer", model_path("tok512.model")};
    // f32 caches unless a test names its types: the tests compare the server's
    // answers with the library's, whose default cache is f32 (the server's is q8_0).
    if (std::find(args.begin(), args.end(), "--cache-type-k") == args.end())
      args.insert(args.begin(), {"--cache-type-k", "f32", "--cache-type-v", "f32"});
    args.insert(args.begin(), {"--port", "0", "-j", "1"});
    args.insert(args.begin(), model.begin(), model.end());
    args.insert(args.begin(), STREAMLLM_SERVER_BINARY);
    args.insert(args.begin(), launcher.begin(), launcher.end());
    int out[2];
    REQUIRE(::pipe(out) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::_Exit(127);
    }
    ::close(out[1]);
    out_ = ::fdopen(out[0], "r");
    char line[512] = {};
    REQUIRE(std::fgets(line, sizeof line, out_) != nullptr);
    std::cmatch m;
    INFO("the server printed: " << line);
    REQUIRE(std::regex_search(line, m, std::regex(":([0-9]+) \\(")));
    port_ = std::stoi(m[1]);
  }
  ~ServerProcess() {
    if (pid_ > 0) stop();
    if (out_) std::fclose(out_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }

  // SIGTERM and the exit status (0: a clean, graceful stop).
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // The process has been waited for by the caller: nothing to stop.
  void forget() { pid_ = -1; }

  // Resident memory of the server, from /proc.
  std::size_t rss_kib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
    return 0;
  }

  httplib::Client client(const std::string& key = {}) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    if (!key.empty()) c.set_bearer_token_auth(key);
    return c;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int port_ = 0;
};

// A POST whose response body is handed to on_data as it arrives (return
// false to hang up): what a streaming client does.
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

inline httplib::Result post_json(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
  return c.Post(path.c_str(), body.dump(), "application/json");
}

// A plain TCP connection to the server, for what an HTTP library will not send.
class RawSocket {
 public:
  explicit RawSocket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool send(std::string_view data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Reads until the peer closes, `until` appears, or the time is up.
  std::string read(std::chrono::milliseconds limit, const std::string& until = {}) {
    std::string got;
    const auto end = std::chrono::steady_clock::now() + limit;
    timeval tv{0, 50000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[65536];
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
      if (!until.empty() && got.find(until) != std::string::npos) break;
    }
    return got;
  }

 private:
  int fd_;
};

// The text of a streamed response: the pieces of its events, in order, and
// whether it ended with [DONE].
struct Events {
  std::string text;
  std::vector<nlohmann::json> chunks;
  bool done = false;
};
inline Events read_events(const std::string& body, bool chat) {
  Events e;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const auto end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      e.done = true;
      continue;
    }
    const auto j = nlohmann::json::parse(data);
    e.chunks.push_back(j);
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const auto& choice = j["choices"][0];
    if (chat) {
      if (choice.at("delta").contains("content")) e.text += choice["delta"]["content"].get<std::string>();
    } else {
      e.text += choice.at("text").get<std::string>();
    }
  }
  return e;
}

}  // namespace test
