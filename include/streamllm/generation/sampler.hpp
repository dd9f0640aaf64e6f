// Choosing the next token from logits: greedy, temperature, top-k, top-p
// (Holtzman et al. 2019), the CTRL repetition penalty (Keskar et al. 2019),
// OpenAI's presence and frequency penalties and a per-token logit bias; and
// the log-probabilities an API reports beside each chosen token.
// Seeded with our own generator, so the same seed gives the same tokens on
// every platform and standard library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "streamllm/core/config.hpp"
#include "streamllm/core/error.hpp"

namespace streamllm {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax)
  int top_k = 0;                    // keep the k most likely tokens; 0: all
  float top_p = 1.0f;               // keep the smallest set whose probability reaches p
  float repetition_penalty = 1.0f;  // > 1 discourages tokens already in the window; 1: off
  int repetition_window = 64;       // how many recent tokens the penalty looks at
  // OpenAI's penalties: logit[j] -= c[j] * frequency + (c[j] > 0) * presence,
  // c[j] the times this sampler has chosen j (the tokens of this generation).
  float presence_penalty = 0.0f;                      // [-2, 2]
  float frequency_penalty = 0.0f;                     // [-2, 2]
  std::vector<std::pair<TokenId, float>> logit_bias;  // added to a token's logit, [-100, 100]
  std::uint64_t seed = 0;

  void validate() const {
    if (!(temperature >= 0.0f) || !std::isfinite(temperature))
      throw InputError("sampling: temperature " + std::to_string(temperature) + " must be >= 0");
    if (top_k < 0) throw InputError("sampling: top_k " + std::to_string(top_k) + " must be >= 0");
    if (!(top_p > 0.0f && top_p <= 1.0f)) throw InputError("sampling: top_p " + std::to_string(top_p) + " must be in (0, 1]");
    if (!(repetition_penalty > 0.0f))
      throw InputError("sampling: repetition_penalty " + std::to_string(repetition_penalty) + " must be > 0");
    if (repetition_window < 0) throw InputError("sampling: repetition_window must be >= 0");
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
      throw InputError("sampling: presence_penalty " + std::to_string(presence_penalty) + " must be in [-2, 2]");
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
      throw InputError("sampling: frequency_penalty " + std::to_string(frequency_penalty) + " must be in [-2, 2]");
    for (const auto& [id, bias] : logit_bias) {
      if (id < 0) throw InputError("sampling: logit_bias names token " + std::to_string(id));
      if (!(bias >= -100.0f && bias <= 100.0f))
        throw InputError("sampling: logit_bias of token " + std::to_string(id) + " is " + std::to_string(bias) +
                         ", must be in [-100, 100]");
    }
  }

  // Whether any term changes the model's logits before they are ranked.
  bool adjusts_logits() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty();
  }
};

// xoshiro256** (Blackman & Vigna), seeded through splitmix64.
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) { reseed(seed); }
  void reseed(std::uint64_t seed) {
    for (auto& s : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s = z ^ (z >> 31);
    }
  }
  std::uint64_t next() {
    const std::uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  // Uniform in [0, 1) with 24 random bits: exactly representable in float.
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

inline TokenId argmax(std::span<const float> logits) {
  return static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

class Sampler {
 public:
  struct Candidate {
    TokenId id;
    float p;  // logit while filtering, probability after
  };

  explicit Sampler(SamplingParams params = {}) : params_(params), rng_(params.seed) { params_.validate(); }

  const SamplingParams& params() const { return params_; }
  void reseed(std::uint64_t seed) { rng_.reseed(seed); }

  // Picks the next token; `history` holds the tokens seen so far (only its
  // last repetition_window entries matter).
  TokenId sample(std::span<const float> logits, std::span<const TokenId> history = {}) {
    const TokenId id = choose(logits, history);
    record(id);
    return id;
  }

  // The tokens sampling may choose, most likely first, with probabilities
  // that sum to 1 (after temperature, top-k and top-p). With temperature 0
  // only the argmax is kept.
  const std::vector<Candidate>& candidates(std::span<const float> logits, std::span<const TokenId> history = {}) {
    adjusted_logits(logits, history);
    auto by_logit = [](const Candidate& a, const Candidate& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); };
    if (params_.temperature <= 0.0f) {
      std::nth_element(cand_.begin(), cand_.begin(), cand_.end(), by_logit);
      cand_.resize(1);
      cand_[0].p = 1.0f;
      return cand_;
    }
    std::size_t k = cand_.size();
    if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < k) {
      k = static_cast<std::size_t>(params_.top_k);
      std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k - 1), cand_.end(), by_logit);
      cand_.resize(k);
    }
    std::sort(cand_.begin(), cand_.end(), by_logit);
    // softmax(logit / T), in double so that 32000 small terms add up exactly enough
    const double inv_t = 1.0 / params_.temperature, top = cand_.front().p;
    double sum = 0;
    probs_.resize(cand_.size());
    for (std::size_t i = 0; i < cand_.size(); ++i) sum += probs_[i] = std::exp((cand_[i].p - top) * inv_t);
    std::size_t keep = cand_.size();
    if (params_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p
      double mass = 0;
      for (std::size_t i = 0; i < cand_.size(); ++i) {
        mass += probs_[i] / sum;
        if (mass >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    double kept_mass = 0;
    for (std::size_t i = 0; i < keep; ++i) kept_mass += probs_[i];
    cand_.resize(keep);
    for (std::size_t i = 0; i < keep; ++i) cand_[i].p = static_cast<float>(probs_[i] / kept_mass);
    return cand_;
  }

  // The logits sampling ranks: the model's, after the repetition penalty
  // (over `history`), the presence and frequency penalties (over the tokens
  // this sampler chose) and the logit bias. Valid until the next call.
  std::span<const float> adjusted_logits(std::span<const float> logits, std::span<const TokenId> history = {}) {
    check_logits(logits);
    cand_.resize(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) cand_[i] = {static_cast<TokenId>(i), logits[i]};
    apply_penalty(history);
    if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
      for (TokenId id : chosen_) {
        if (static_cast<std::size_t>(id) >= cand_.size()) continue;
        const auto c = static_cast<float>(counts_[static_cast<std::size_t>(id)]);
        cand_[static_cast<std::size_t>(id)].p -= c * params_.frequency_penalty + params_.presence_penalty;
      }
    for (const auto& [id, bias] : params_.logit_bias)
      if (static_cast<std::size_t>(id) < cand_.size()) cand_[static_cast<std::size_t>(id)].p += bias;
    adjusted_.resize(cand_.size());
    for (std::size_t i = 0; i < cand_.size(); ++i) adjusted_[i] = cand_[i].p;
    return adjusted_;
  }

  // How often this sampler has chosen `id` so far.
  int times_chosen(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < counts_.size() ? counts_[static_cast<std::size_t>(id)] : 0;
  }

  // NaN or +Inf cannot be ranked or normalised (sorting NaN is undefined
  // behaviour); they come from weights holding NaN/Inf or from activations
  // that overflowed. -Inf is a masked token and stays.
  static void check_logits(std::span<const float> logits) {
    if (logits.empty()) throw InputError("sampling: no logits");
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity())
        throw InputError("sampling: the logit of token " + std::to_string(i) + " is " + (std::isnan(logits[i]) ? "NaN" : "+Inf") +
                         "; the model's weights hold NaN/Inf or its activations overflowed");
  }

 private:
  bool penalised(std::span<const TokenId> history) const {
    return params_.repetition_penalty != 1.0f && params_.repetition_window > 0 && !history.empty();
  }

  TokenId choose(std::span<const float> logits, std::span<const TokenId> history) {
    const bool adjusted = penalised(history) ||
                          (!chosen_.empty() && (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)) ||
                          !params_.logit_bias.empty();
    if (params_.temperature <= 0.0f && !adjusted) {
      check_logits(logits);
      return argmax(logits);
    }
    const std::vector<Candidate>& kept = candidates(logits, history);  // checks the logits
    if (params_.temperature <= 0.0f) return kept.front().id;
    float u = rng_.uniform();
    for (const Candidate& c : kept) {
      if (u < c.p) return c.id;
      u -= c.p;
    }
    return kept.back().id;  // rounding left u just above the total
  }

  // Counts for the presence and frequency penalties (only when they are on:
  // a count per vocabulary entry, and the distinct ids to visit).
  void record(TokenId id) {
    if (params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f) return;
    const auto i = static_cast<std::size_t>(id);
    if (counts_.size() <= i) counts_.resize(i + 1, 0);
    if (counts_[i]++ == 0) chosen_.push_back(id);
  }

  // CTRL: a seen token's logit is divided by the penalty when positive,
  // multiplied when negative; once per distinct token.
  void apply_penalty(std::span<const TokenId> history) {
    if (!penalised(history)) return;
    const std::size_t n = std::min(history.size(), static_cast<std::size_t>(params_.repetition_window));
    seen_.clear();
    for (TokenId id : history.subspan(history.size() - n)) {
      if (id < 0 || static_cast<std::size_t>(id) >= cand_.size()) continue;
      if (std::find(seen_.begin(), seen_.end(), id) != seen_.end()) continue;
      seen_.push_back(id);
      float& l = cand_[static_cast<std::size_t>(id)].p;
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }

  SamplingParams params_;
  Rng rng_;
  std::vector<Candidate> cand_;
  std::vector<double> probs_;
  std::vector<TokenId> seen_;
  std::vector<int> counts_;      // times each id was chosen (penalties on only)
  std::vector<TokenId> chosen_;  // ids with a count > 0
  std::vector<float> adjusted_;
};

// What an API reports with a chosen token: its log-probability under the
// model (log-softmax of the model's logits, before any sampling filter) and
// the `top` most likely alternatives, most likely first.
struct TokenLogprob {
  TokenId id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<TokenId, float>> top;
};

inline TokenLogprob token_logprob(std::span<const float> logits, TokenId chosen, int top) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;  // in double: 32000 terms
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double log_z = static_cast<double>(mx) + std::log(sum);
  auto lp = [&](TokenId id) { return static_cast<float>(logits[static_cast<std::size_t>(id)] - log_z); };
  TokenLogprob out{chosen, lp(chosen), {}};
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(std::max(top, 0)), logits.size());
  if (k == 0) return out;
  std::vector<TokenId> ids(logits.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  auto more_likely = [&](TokenId a, TokenId b) {
    const float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), more_likely);
  for (std::size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], lp(ids[i]));
  return out;
}

}  // namespace streamllm
