// A server's counters in Prometheus' text format (version 0.0.4): what
// /metrics answers. Counters only grow; gauges are read when asked.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace streamllm::serve {

struct Gauges {
  std::size_t running = 0, waiting = 0, pool_bytes = 0, pool_entries = 0;
};

class Metrics {
 public:
  // Time-to-first-token histogram buckets, in seconds.
  static constexpr std::array<double, 11> kBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  void request(const std::string& endpoint, int status) {
    std::lock_guard lock(mu_);
    ++requests_[{endpoint, status}];
  }
  void sequence(std::size_t prompt, std::size_t cached, std::size_t generated, double ttft_s, bool has_first_token) {
    prompt_tokens_ += prompt;
    cached_tokens_ += cached;
    generated_tokens_ += generated;
    if (!has_first_token) return;
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
      if (ttft_s <= kBuckets[i]) ++ttft_counts_[i];
    ++ttft_count_;
    ttft_sum_ += ttft_s;
  }

  std::string text(const Gauges& g) const {
    std::string out;
    auto line = [&](const char* fmt, auto... args) {
      char buf[256];
      std::snprintf(buf, sizeof buf, fmt, args...);
      out += buf;
    };
    std::lock_guard lock(mu_);
    out +=
        "# HELP streamllm_requests_total HTTP requests answered, by endpoint and status.\n"
        "# TYPE streamllm_requests_total counter\n";
    for (const auto& [key, n] : requests_)
      line("streamllm_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", key.first.c_str(), key.second,
           static_cast<unsigned long long>(n));
    auto counter = [&](const char* name, const char* help, std::uint64_t v) {
      line("# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, static_cast<unsigned long long>(v));
    };
    auto gauge = [&](const char* name, const char* help, std::size_t v) {
      line("# HELP %s %s\n# TYPE %s gauge\n%s %zu\n", name, help, name, name, v);
    };
    counter("streamllm_prompt_tokens_total", "Prompt tokens of finished sequences (cached ones included).", prompt_tokens_);
    counter("streamllm_cached_tokens_total", "Prompt tokens found in a kept cache instead of prefilled.", cached_tokens_);
    counter("streamllm_generated_tokens_total", "Tokens generated.", generated_tokens_);
    gauge("streamllm_sequences_running", "Sequences in the batch.", g.running);
    gauge("streamllm_sequences_waiting", "Sequences queued behind the batch.", g.waiting);
    gauge("streamllm_cache_pool_bytes", "Memory of the caches kept for prefix reuse.", g.pool_bytes);
    gauge("streamllm_cache_pool_entries", "Caches kept for prefix reuse.", g.pool_entries);
    out +=
        "# HELP streamllm_time_to_first_token_seconds Request arrival to its first generated token.\n"
        "# TYPE streamllm_time_to_first_token_seconds histogram\n";
    for (std::size_t i = 0; i < kBuckets.size(); ++i)
      line("streamllm_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", kBuckets[i],
           static_cast<unsigned long long>(ttft_counts_[i]));
    line("streamllm_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", static_cast<unsigned long long>(ttft_count_));
    line("streamllm_time_to_first_token_seconds_sum %.6f\n", ttft_sum_);
    line("streamllm_time_to_first_token_seconds_count %llu\n", static_cast<unsigned long long>(ttft_count_));
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::atomic<std::uint64_t> prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  std::array<std::uint64_t, kBuckets.size()> ttft_counts_{};
  std::uint64_t ttft_count_ = 0;
  double ttft_sum_ = 0;
};

}  // namespace streamllm::serve
