// An OpenAI-compatible service over the batch scheduler, free of any HTTP
// library: a binding hands it each request (transport.hpp: method, target,
// headers, body) and writes back what it answers. Answers that need the
// model come back as an Exchange, filled from the scheduler's thread as
// pieces are generated: server-sent events for a stream, one JSON body at
// the end otherwise. The endpoints are the route table (ApiService::kRoutes);
// requests are read by openai_request.hpp, answers written by
// openai_response.hpp.
//
// Conversations reuse their KV cache across requests: each sequence asks
// the scheduler for a cache rather than bringing one, and answers the model
// gave are kept (KnownAnswers) so that a dialog resent as text reads as the
// ids the cache holds.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "streamllm/core/utf8.hpp"
#include "streamllm/serve/engine.hpp"
#include "streamllm/serve/metrics.hpp"
#include "streamllm/serve/openai_request.hpp"
#include "streamllm/serve/openai_response.hpp"
#include "streamllm/serve/transport.hpp"
#include "streamllm/text/chat_template.hpp"

namespace streamllm::serve {

using json = nlohmann::json;

struct ServiceOptions {
  std::string model_name = "streamllm";
  std::size_t max_sequences = 8;  // in the batch at once
  std::size_t max_waiting = 64;   // queued behind them; more get 429
  std::size_t step_tokens = 256;
  int close_wait_ms = 100;             // SchedulerOptions::close_wait
  std::int64_t sinks = 4, window = 0;  // window 0: dense caches
  KVTypes cache_types;                 // what every conversation's keys and values are stored in
  int default_max_tokens = 256;
  std::size_t cache_bytes = std::size_t(512) << 20;  // kept caches in memory (0: no reuse)
  std::string cache_dir;                             // evicted caches on disk ("" : none)
  std::uintmax_t cache_dir_bytes = std::uintmax_t(4) << 30;
  std::string api_key;              // "" : no key
  std::string cors_origin;          // "" : no CORS headers; "*" : any origin
  bool loopback_hosts_only = true;  // accept only loopback Host names (a loopback bind: DNS rebinding)
  int retry_after_s = 1;
  std::string chat_template;  // a ChatTemplate name; "" : the model file's
  std::function<void(const std::string&)> warn;
};

// Not a template: the model's shape is behind the Engine, so a program that
// serves several shapes compiles this class (and its HTTP binding) once.
class ApiService {
 public:
  struct Handled {
    HttpReply reply;                     // the answer, unless `exchange` is set
    std::shared_ptr<Exchange> exchange;  // a generation: its answer comes from here
  };

  template <class Config>
  ApiService(Llama<Config>& model, const Tokenizer& tok, ServiceOptions opt) : ApiService(tok, std::move(opt), Config::shape()) {
    // Sizes and types checked once, before any request.
    if (opt_.window > 0) DynamicSinkWindowKVCache<Config> probe(opt_.sinks, opt_.window, opt_.cache_types);
    kv_check_row(opt_.cache_types.k, Config::KVDim, "the server's KV caches");
    kv_check_row(opt_.cache_types.v, Config::KVDim, "the server's KV caches");
    // Made here, after the members its pool's folder is read into (known_).
    engine_ = std::make_unique<BatchEngine<Config>>(model, tok, scheduler_options());
  }

  void start() { engine_->start(); }
  // Graceful: no new generations; those running get up to `grace` to end,
  // then end as cancelled; every stream gets its final event and [DONE].
  void drain(std::chrono::milliseconds grace) {
    draining_ = true;
    engine_->drain(grace);
  }
  void stop() { engine_->stop(); }

  const ServiceOptions& options() const { return opt_; }
  const Engine& engine() const { return *engine_; }
  std::size_t known_answers() const { return known_.size(); }
  const ChatTemplate& chat_template() const { return template_; }

  Handled handle(const HttpRequest& req) {
    Handled h;
    const std::string path(req.path());
    const Route* route = find_route(path);
    try {
      check_host(req);
      if (!route) throw openai::ApiError(404, "no such endpoint: " + req.method + " " + path);
      serve(*route, req, path, h);
    } catch (const openai::ApiError& e) {
      h = {};
      h.reply = openai::error_reply(e.status(), e.what(), e.param(), e.type());
      if (e.status() == 429 || e.status() == 503) h.reply.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
      if (e.status() == 405) h.reply.headers.emplace_back("Allow", allowed(*route));
      if (e.status() == 401) h.reply.headers.emplace_back("WWW-Authenticate", "Bearer");
    } catch (const std::exception& e) {
      h = {};
      h.reply = openai::error_reply(500, e.what());
    }
    add_cors(req, h.exchange ? nullptr : &h.reply);
    if (!h.exchange) metrics_.request(route ? std::string(route->metric) : "other", h.reply.status);
    return h;
  }

  // What a binding answers when it cannot take a request at all (too many
  // connections): 503, with the service's Retry-After.
  HttpReply unavailable(std::string_view why) const {
    HttpReply r = openai::error_reply(503, why);
    r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
    return r;
  }

  // Headers a cross-origin browser client needs on every answer (empty when
  // CORS is off or the origin is not the allowed one).
  std::vector<std::pair<std::string, std::string>> cors_headers(std::string_view origin) const {
    if (opt_.cors_origin.empty() || origin.empty()) return {};
    if (opt_.cors_origin != "*" && opt_.cors_origin != origin) return {};
    return {{"Access-Control-Allow-Origin", opt_.cors_origin == "*" ? "*" : std::string(origin)}, {"Vary", "Origin"}};
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  ApiService(const Tokenizer& tok, ServiceOptions opt, ModelShape shape)
      : tok_(&tok),
        opt_(std::move(opt)),
        shape_(shape),
        created_(now_s()),
        seeds_(std::random_device{}()),
        template_(ChatTemplate::for_model(tok, opt_.chat_template)),
        answer_end_(answer_end_ids(tok, template_)) {
    if (tok.vocab_size() != shape_.vocab)
      throw InputError("server: the tokenizer has " + std::to_string(tok.vocab_size()) + " pieces, the model " +
                       std::to_string(shape_.vocab));
  }

  SchedulerOptions scheduler_options() {
    SchedulerOptions o;
    o.max_active = opt_.max_sequences;
    o.max_waiting = opt_.max_waiting;
    o.step_tokens = opt_.step_tokens;
    o.close_wait = std::chrono::milliseconds(opt_.close_wait_ms);
    o.pool.max_bytes = opt_.cache_bytes;
    o.share_prefixes = opt_.cache_bytes > 0;  // --cache-mib 0: no reuse of any kind (a baseline)
    o.pool.dir = opt_.cache_dir;
    o.pool.types = opt_.cache_types;
    o.pool.max_dir_bytes = opt_.cache_dir_bytes;
    o.pool.warn = opt_.warn;
    o.pool.on_disk_note = [this](const std::string& note) { remember_note(note); };
    return o;
  }

  // The answers a kept cache holds, saved with it: a restarted server reads
  // the resent dialog as the same ids.
  static std::string make_note(const std::vector<DialogAnswer>& answers, const GenerationResult& r) {
    json a = json::array();
    for (const auto& d : answers) a.push_back({d.text, d.ids});
    a.push_back({r.text, r.tokens});
    return openai::dump(a);
  }
  void remember_note(const std::string& note) {
    try {
      for (const json& d : json::parse(note)) known_.remember(d.at(0).get<std::string>(), d.at(1).get<std::vector<TokenId>>());
    } catch (const std::exception& e) {
      if (opt_.warn) opt_.warn(std::string("a kept cache's note does not read: ") + e.what());
    }
  }

  // ---- the endpoints -----------------------------------------------------------

  // What a request asks of an endpoint; a handler writes its reply into
  // `h` (or, for a generation, sets h.exchange).
  struct Route;
  struct Call {
    const Route& route;
    const HttpRequest& req;
    const std::string& path;
  };
  using Handler = void (ApiService::*)(const Call&, Handled&);

  // One endpoint: its path (or, with `prefix`, every path that starts with
  // it), its method (GET answers HEAD too; every path answers OPTIONS, a
  // CORS preflight), the name /metrics counts it under, whether it answers
  // without the API key, and its handler.
  struct Route {
    std::string_view path;
    bool prefix;
    std::string_view method;
    std::string_view metric;
    bool open;
    Handler handle;
  };

  // The route table (below the class: its handlers must be declared first).
  static std::span<const Route> routes();

  static const Route* find_route(std::string_view path) {
    for (const Route& r : routes())
      if (r.prefix ? path.size() > r.path.size() && path.substr(0, r.path.size()) == r.path : path == r.path) return &r;
    return nullptr;
  }

  static std::string allowed(const Route& r) { return std::string(r.method) + ", OPTIONS"; }

  static bool loopback_host(std::string_view host) {
    if (host.empty()) return true;  // HTTP/1.0
    std::string_view name = host;
    if (name.front() == '[')
      name = name.substr(0, name.find(']') + 1);
    else
      name = name.substr(0, name.find(':'));
    return name == "localhost" || name == "[::1]" || name.rfind("127.", 0) == 0;
  }

  // A loopback server answers only loopback Host names (DNS rebinding).
  void check_host(const HttpRequest& req) const {
    if (opt_.loopback_hosts_only && !loopback_host(req.header("host")))
      throw openai::ApiError(403,
                             "Host '" + std::string(req.header("host")) +
                                 "' is not accepted: this server listens on loopback and answers only loopback names",
                             {}, "permission_error");
  }

  // The checks every endpoint shares (the method, the key), then its handler.
  void serve(const Route& route, const HttpRequest& req, const std::string& path, Handled& h) {
    using openai::ApiError;
    if (req.method == "OPTIONS") {  // a CORS preflight
      h.reply.status = 204;
      h.reply.headers.emplace_back("Allow", allowed(route));
      if (!cors_headers(req.header("origin")).empty()) {
        h.reply.headers.emplace_back("Access-Control-Allow-Methods", allowed(route));
        h.reply.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
        h.reply.headers.emplace_back("Access-Control-Max-Age", "600");
      }
      return;
    }
    if (req.method != route.method && !(route.method == "GET" && req.method == "HEAD"))
      throw ApiError(405, "method " + req.method + " is not allowed on " + path + " (" + allowed(route) + ")");
    if (!route.open && !opt_.api_key.empty() && req.header("authorization") != "Bearer " + opt_.api_key)
      throw ApiError(401, req.header("authorization").empty() ? "an API key is required: Authorization: Bearer <key>"
                                                              : "the API key is not valid");
    (this->*route.handle)(Call{route, req, path}, h);
  }

  void health(const Call&, Handled& h) {
    h.reply = openai::json_reply(draining_ ? 503 : 200, {{"status", draining_ ? "shutting down" : "ok"},
                                                         {"model", opt_.model_name},
                                                         {"active_sequences", engine_->active()},
                                                         {"waiting_sequences", engine_->waiting()}});
  }

  void metrics(const Call&, Handled& h) {
    h.reply.status = 200;
    h.reply.body = metrics_.text({engine_->active(), engine_->waiting(), engine_->pool_bytes(), engine_->pool_entries()});
    h.reply.headers.emplace_back("Content-Type", "text/plain; version=0.0.4");
  }

  json model_json() const { return openai::model_object(opt_.model_name, created_, shape_, opt_.window > 0); }

  void models(const Call&, Handled& h) {
    h.reply = openai::json_reply(200, {{"object", "list"}, {"data", json::array({model_json()})}});
  }

  void model(const Call& c, Handled& h) {  // /v1/models/{id}
    const std::string id = c.path.substr(std::string_view("/v1/models/").size());
    if (id != opt_.model_name)
      throw openai::ApiError(404, "the model '" + id + "' does not exist; this server has '" + opt_.model_name + "'", "model");
    h.reply = openai::json_reply(200, model_json());
  }

  void completions(const Call& c, Handled& h) { h.exchange = generate(c, openai::Endpoint::Completions); }
  void chat_completions(const Call& c, Handled& h) { h.exchange = generate(c, openai::Endpoint::Chat); }

  json parse_body(const HttpRequest& req) const {
    using openai::ApiError;
    const std::string_view type = req.header("content-type");
    if (type.substr(0, type.find(';')) != "application/json")
      throw ApiError(415, "the body must be JSON, sent with Content-Type: application/json" +
                              (type.empty() ? std::string() : " (not '" + std::string(type) + "')"));
    if (const std::size_t bad = first_invalid_utf8(req.body); bad != std::string_view::npos)
      throw ApiError(400, "the body is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    try {
      return json::parse(req.body);
    } catch (const json::exception& e) {
      throw ApiError(400, std::string("the body is not valid JSON: ") + e.what());
    }
  }

  void tokenize(const Call& c, Handled& h) {
    using openai::ApiError;
    const json body = parse_body(c.req);
    const auto it = body.find("content");
    if (!body.is_object() || it == body.end() || !it->is_string()) throw ApiError(400, "'content' must be a string", "content");
    const bool special = openai::detail::boolean(body, "add_special", false);
    const bool pieces = openai::detail::boolean(body, "with_pieces", false);
    const auto ids = tok_->encode(it->get<std::string>(), special);
    json tokens = json::array();
    for (TokenId id : ids) tokens.push_back(pieces ? json{{"id", id}, {"piece", openai::token_text(*tok_, id)}} : json(id));
    h.reply = openai::json_reply(200, {{"tokens", tokens}});
  }

  void detokenize(const Call& c, Handled& h) {
    using openai::ApiError;
    const json body = parse_body(c.req);
    const auto it = body.find("tokens");
    if (!body.is_object() || it == body.end() || !it->is_array())
      throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
    const openai::Limits lim{static_cast<int>(shape_.vocab)};
    const auto ids = it->empty() ? std::vector<TokenId>() : openai::detail::token_array(*it, lim, "tokens");
    h.reply = openai::json_reply(200, {{"content", tok_->decode(ids)}});
  }

  // The cache a request's sequences ask for: sink+window if the server runs
  // them, else dense with room for the prompt, the answer and its closing EOS,
  // rounded up to a power of two (at least 256 positions, at most MaxSeq).
  // A conversation goes on in the same cache, which grows in place
  // (KVCache::grow) when a turn needs more room: the power of two keeps the
  // capacity a pool's budget counts within twice the positions used.
  CacheShape cache_shape(std::size_t prompt, int max_tokens) const {
    if (opt_.window > 0) return {opt_.sinks, opt_.window, 0, opt_.cache_types};
    const auto need = static_cast<std::uint64_t>(prompt) + static_cast<std::uint64_t>(std::max(max_tokens, 0)) + 2;
    const auto room = std::bit_ceil(std::max<std::uint64_t>(need, 256));
    return {0, 0, static_cast<std::int64_t>(std::min<std::uint64_t>(shape_.max_seq, room)), opt_.cache_types};
  }

  struct Choice {
    std::optional<GenerationResult> result;
    std::size_t text_bytes = 0;                // streamed so far (completions' text_offset)
    openai::CompletionLogprobs completion_lp;  // whole answers
    json chat_lp = json::array();
  };

  // The state of one generating request, shared by its sequences' callbacks.
  struct Job {
    openai::Envelope env;
    openai::Request req;
    std::shared_ptr<Exchange> ex;
    std::vector<Choice> choices;
    std::vector<std::pair<std::string, std::string>> origin_headers;  // CORS
    std::string_view metric;                                          // its route's, for /metrics
    std::size_t done = 0;
    bool abandoned = false;  // its submission failed: the answer was an error
    std::mutex mu;
  };

  // A stream's head, and for chat each choice's first event with its role (as OpenAI opens them).
  static void open_stream(Job& job) {
    HttpReply head;
    head.headers = {{"Content-Type", "text/event-stream"}, {"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    for (auto& kv : job.origin_headers) head.headers.push_back(kv);
    job.ex->set_head(std::move(head));
    if (!job.env.chat()) return;
    std::string first;
    for (std::size_t c = 0; c < job.choices.size(); ++c) first += openai::sse(job.env.role_chunk(c));
    job.ex->write(first);
  }

  std::shared_ptr<Exchange> generate(const Call& call, openai::Endpoint ep) {
    using openai::ApiError;
    if (draining_) throw ApiError(503, "the server is shutting down");
    const json body = parse_body(call.req);
    openai::Limits lim;
    lim.vocab = static_cast<int>(shape_.vocab);
    lim.context = opt_.window > 0 ? 0 : shape_.max_seq;
    lim.default_max_tokens = opt_.default_max_tokens;
    lim.max_n = static_cast<int>(std::clamp<std::size_t>(opt_.max_sequences + opt_.max_waiting, 1, 16));
    lim.max_prompt_bytes = opt_.window > 0 ? 0 : static_cast<std::size_t>(shape_.max_seq) * 64;
    auto job = std::make_shared<Job>();
    job->req = openai::parse_request(body, ep, *tok_, template_, lim, &known_);
    job->env = {std::string(ep == openai::Endpoint::Chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_), opt_.model_name,
                now_s(), ep, job->req.include_usage};
    job->metric = call.route.metric;
    job->choices.resize(job->req.choices());
    job->ex = std::make_shared<Exchange>(job->req.stream);
    const std::uint64_t seed = job->req.seed ? *job->req.seed : next_seed();
    job->origin_headers = cors_headers(call.req.header("origin"));
    if (job->req.stream) open_stream(*job);

    std::vector<SequenceId> ids;
    auto cancel_all = [this, &ids] {
      for (SequenceId id : ids) engine_->cancel(id);
    };
    try {
      for (std::size_t c = 0; c < job->choices.size(); ++c) {
        const auto& prompt = job->req.prompts[c / static_cast<std::size_t>(job->req.n)];
        SequenceRequest r;
        r.prompt = prompt;
        r.cache_shape = cache_shape(prompt.size(), job->req.options.max_new_tokens);
        r.options = job->req.options;
        r.options.sampling.seed = seed + c;
        if (ep == openai::Endpoint::Chat) r.answer_end = answer_end_;
        r.on_piece = [this, job, c](const Piece& p) { return on_piece(*job, c, p); };
        r.on_done = [this, job, c](const GenerationResult& res) { on_done(*job, c, res); };
        if (ep == openai::Endpoint::Chat)
          r.note = [answers = job->req.answers](const GenerationResult& res) { return make_note(answers, res); };
        ids.push_back(engine_->submit(std::move(r)));
      }
    } catch (const CapacityError& e) {
      abandon(*job, cancel_all);
      throw ApiError(429, e.what());
    } catch (const ShutdownError& e) {
      abandon(*job, cancel_all);
      throw ApiError(503, e.what());
    } catch (const InputError& e) {
      abandon(*job, cancel_all);
      throw ApiError(400, e.what());
    }
    job->ex->set_cancel([this, ids] {
      for (SequenceId id : ids) engine_->cancel(id);
    });
    return job->ex;
  }

  void abandon(Job& job, const std::function<void()>& cancel_all) {
    {
      std::lock_guard lock(job.mu);
      job.abandoned = true;
    }
    cancel_all();
  }

  std::uint64_t next_seed() {
    std::lock_guard lock(seed_mu_);
    return seeds_();
  }

  // On the scheduler's thread: a piece of choice c.
  bool on_piece(Job& job, std::size_t c, const Piece& p) {
    std::lock_guard lock(job.mu);
    if (job.abandoned) return false;
    Choice& ch = job.choices[c];
    const bool chat = job.req.endpoint == openai::Endpoint::Chat;
    if (!job.req.stream) {
      if (job.req.logprobs) {
        if (chat)
          for (auto& e : openai::chat_logprobs(*tok_, p.logprobs)) ch.chat_lp.push_back(std::move(e));
        else
          ch.completion_lp.add(*tok_, p.logprobs, ch.text_bytes);
      }
      ch.text_bytes += p.text.size();
      return true;
    }
    json lp = nullptr;
    if (job.req.logprobs) {
      if (chat) {
        lp = openai::chat_logprobs_object(openai::chat_logprobs(*tok_, p.logprobs));
      } else {
        openai::CompletionLogprobs l;
        l.add(*tok_, p.logprobs, ch.text_bytes);
        lp = l.to_json();
      }
    }
    ch.text_bytes += p.text.size();
    job.ex->write(openai::sse(job.env.piece_chunk(c, p.text, std::move(lp))));
    return true;
  }

  // On the scheduler's thread: choice c has ended.
  void on_done(Job& job, std::size_t c, const GenerationResult& res) {
    metrics_.sequence(res.prompt_tokens, res.cached_tokens, res.tokens.size(), res.time_to_first_token_s, !res.tokens.empty());
    const bool chat = job.req.endpoint == openai::Endpoint::Chat;
    if (chat && res.stop != StopReason::Error) known_.remember(res.text, res.tokens);
    std::lock_guard lock(job.mu);
    if (job.abandoned) return;
    job.choices[c].result = res;
    if (job.req.stream) {
      if (res.stop == StopReason::Error)
        job.ex->write(openai::sse(openai::error_body(res.error, 500)));
      else
        job.ex->write(openai::sse(job.env.finish_chunk(c, res.stop)));
    }
    if (++job.done < job.choices.size()) return;
    finish(job);
  }

  // Tokens of the request: each prompt once (its n choices share it), every choice's completion.
  static json usage(const Job& job) {
    std::size_t prompt = 0, completion = 0, cached = 0;
    const auto n = static_cast<std::size_t>(job.req.n);
    for (std::size_t c = 0; c < job.choices.size(); ++c) {
      const GenerationResult& r = *job.choices[c].result;
      completion += r.tokens.size();
      if (c % n == 0) {
        prompt += r.prompt_tokens;
        cached += r.cached_tokens;
      }
    }
    return openai::usage(prompt, completion, cached);
  }

  // The choices of a whole (not streamed) answer.
  static json whole_choices(const Job& job) {
    json choices = json::array();
    for (std::size_t c = 0; c < job.choices.size(); ++c) {
      const Choice& ch = job.choices[c];
      json lp = nullptr;
      if (job.req.logprobs) lp = job.env.chat() ? openai::chat_logprobs_object(ch.chat_lp) : ch.completion_lp.to_json();
      choices.push_back(job.env.whole_choice(c, ch.result->text, ch.result->stop, std::move(lp)));
    }
    return choices;
  }

  // Every choice has ended: the whole answer, or the stream's last events.
  void finish(Job& job) {
    const json use = usage(job);
    const GenerationResult& first = *job.choices[0].result;
    const Choice* failed = nullptr;
    for (const Choice& ch : job.choices)
      if (!failed && ch.result->stop == StopReason::Error) failed = &ch;
    metrics_.request(std::string(job.metric), failed ? 500 : 200);
    if (job.req.stream) {
      std::string tail;
      if (job.req.include_usage) tail += openai::sse(job.env.usage_chunk(use, openai::timings(first)));
      tail += openai::kSseDone;
      job.ex->write(tail, true);
      return;
    }
    HttpReply head = failed ? openai::error_reply(500, "generation failed: " + failed->result->error)
                            : openai::json_reply(200, job.env.whole(whole_choices(job), use, openai::timings(first)));
    for (auto& kv : job.origin_headers) head.headers.push_back(kv);
    job.ex->write(head.body, true, head);
  }

  void add_cors(const HttpRequest& req, HttpReply* reply) const {
    if (!reply) return;
    for (auto& kv : cors_headers(req.header("origin"))) reply->headers.push_back(kv);
  }

  const Tokenizer* tok_;
  ServiceOptions opt_;
  ModelShape shape_;
  std::int64_t created_;
  std::atomic<std::uint64_t> next_id_ = 0;
  std::mutex seed_mu_;
  std::mt19937_64 seeds_;
  ChatTemplate template_;             // the chat endpoint's format
  std::vector<TokenId> answer_end_;  // what it writes after an answer
  std::atomic<bool> draining_ = false;
  Metrics metrics_;
  KnownAnswers known_;  // before the engine: its pool's folder is read into it
  // Last: destroyed first, its sequences' on_done still find the members above.
  std::unique_ptr<Engine> engine_;
};

// Every endpoint the service answers: one line each.
inline std::span<const ApiService::Route> ApiService::routes() {
  static constexpr Route kRoutes[] = {
      {"/health", false, "GET", "/health", true, &ApiService::health},
      {"/metrics", false, "GET", "/metrics", false, &ApiService::metrics},
      {"/v1/models", false, "GET", "/v1/models", false, &ApiService::models},
      {"/v1/models/", true, "GET", "/v1/models/{id}", false, &ApiService::model},
      {"/v1/completions", false, "POST", "/v1/completions", false, &ApiService::completions},
      {"/completions", false, "POST", "/v1/completions", false, &ApiService::completions},
      {"/v1/chat/completions", false, "POST", "/v1/chat/completions", false, &ApiService::chat_completions},
      {"/chat/completions", false, "POST", "/v1/chat/completions", false, &ApiService::chat_completions},
      {"/tokenize", false, "POST", "/tokenize", false, &ApiService::tokenize},
      {"/detokenize", false, "POST", "/detokenize", false, &ApiService::detokenize},
  };
  return kRoutes;
}

}  // namespace streamllm::serve
