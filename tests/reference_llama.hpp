// A float64 Llama forward pass written from the papers (RMSNorm, RoPE,
// grouped-query attention, SwiGLU) and sharing no code with the library: the
// oracle for the models the tests write themselves, as the goldens in
// ../shared are for stories260K. Slow and plain on purpose.
//
// RoPE rotates the pair (x[2i], x[2i+1]) by pos * theta^(-2i/d) / factor_i
// (Llama 3.1's rope_freqs.weight divides each frequency by its factor).
// Keys are kept unrotated and rotated when attended to, at the position the
// attention rule gives them: with a sink+window cache (StreamingLLM) token t
// sees sinks 0..S-1 and the window t-W+1..t; once t >= S+W, sink i sits at
// position i, window key j at S+j and the query at S+W-1. The library rotates
// keys once and re-rotates differently: the two formulations meet only if
// both are right.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace test {

struct ReferenceModel {
  int dim = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0;
  double theta = 10000.0, eps = 1e-5;
  std::vector<double> freq_factors;  // empty, or one per pair of a head
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, ffn_norm, gate, down, up;  // matrices row-major [out][in]
  };
  std::vector<float> embedding;  // [vocab][dim], also the classifier (tied)
  std::vector<Layer> layer;
  std::vector<float> final_norm;
};

class ReferenceLlama {
 public:
  // sinks = window = 0: dense.
  ReferenceLlama(const ReferenceModel& m, int sinks = 0, int window = 0) : m_(m), sinks_(sinks), window_(window) {
    keys_.resize(static_cast<std::size_t>(m.layers));
    values_.resize(static_cast<std::size_t>(m.layers));
  }

  // Consumes `token` at the next position; the logits after it (when asked:
  // the classifier is most of the work).
  std::vector<double> step(int token, bool logits = true) {
    const int d = m_.dim, hd = m_.dim / m_.heads, group = m_.heads / m_.kv_heads, kvd = m_.kv_heads * hd;
    const long t = static_cast<long>(keys_[0].size());  // this token's index in the stream
    std::vector<double> x(m_.embedding.begin() + static_cast<long>(token) * d,
                          m_.embedding.begin() + static_cast<long>(token + 1) * d);
    // Who this token sees, and at which positions (the query's last).
    std::vector<long> seen;
    std::vector<long> seen_pos;
    long query_pos = t;
    const bool windowed = window_ > 0 && t >= sinks_ + window_;
    for (long j = 0; j <= t; ++j) {
      if (window_ > 0 && j >= sinks_ && j < t - window_ + 1) continue;
      seen.push_back(j);
      seen_pos.push_back(windowed ? (j < sinks_ ? j : sinks_ + (j - (t - window_ + 1))) : j);
    }
    if (windowed) query_pos = sinks_ + window_ - 1;
    for (int l = 0; l < m_.layers; ++l) {
      const ReferenceModel::Layer& L = m_.layer[static_cast<std::size_t>(l)];
      const auto h = rmsnorm(x, L.attn_norm);
      auto q = matvec(L.wq, h, d), k = matvec(L.wk, h, kvd), v = matvec(L.wv, h, kvd);
      keys_[static_cast<std::size_t>(l)].push_back(k);  // unrotated
      values_[static_cast<std::size_t>(l)].push_back(v);
      std::vector<double> att(static_cast<std::size_t>(d), 0.0);
      for (int head = 0; head < m_.heads; ++head) {
        std::vector<double> qh(q.begin() + head * hd, q.begin() + (head + 1) * hd);
        rotate(qh, query_pos);
        const int kvh = head / group;
        std::vector<double> scores;
        for (std::size_t s = 0; s < seen.size(); ++s) {
          const auto& key = keys_[static_cast<std::size_t>(l)][static_cast<std::size_t>(seen[s])];
          std::vector<double> kh(key.begin() + kvh * hd, key.begin() + (kvh + 1) * hd);
          rotate(kh, seen_pos[s]);
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += qh[static_cast<std::size_t>(i)] * kh[static_cast<std::size_t>(i)];
          scores.push_back(dot / std::sqrt(static_cast<double>(hd)));
        }
        double mx = scores[0], sum = 0;
        for (double s : scores) mx = std::max(mx, s);
        for (double& s : scores) sum += (s = std::exp(s - mx));
        for (std::size_t s = 0; s < seen.size(); ++s) {
          const auto& val = values_[static_cast<std::size_t>(l)][static_cast<std::size_t>(seen[s])];
          for (int i = 0; i < hd; ++i)
            att[static_cast<std::size_t>(head * hd + i)] += scores[s] / sum * val[static_cast<std::size_t>(kvh * hd + i)];
        }
      }
      const auto o = matvec(L.wo, att, d);
      for (int i = 0; i < d; ++i) x[static_cast<std::size_t>(i)] += o[static_cast<std::size_t>(i)];
      const auto h2 = rmsnorm(x, L.ffn_norm);
      const auto g = matvec(L.gate, h2, m_.hidden), u = matvec(L.up, h2, m_.hidden);
      std::vector<double> a(static_cast<std::size_t>(m_.hidden));
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto down = matvec(L.down, a, d);
      for (int i = 0; i < d; ++i) x[static_cast<std::size_t>(i)] += down[static_cast<std::size_t>(i)];
    }
    if (!logits) return {};
    return matvec(m_.embedding, rmsnorm(x, m_.final_norm), m_.vocab);
  }

 private:
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + m_.eps);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
    return y;
  }
  static std::vector<double> matvec(const std::vector<float>& w, const std::vector<double>& x, int rows) {
    std::vector<double> y(static_cast<std::size_t>(rows), 0.0);
    for (std::size_t r = 0; r < y.size(); ++r)
      for (std::size_t c = 0; c < x.size(); ++c) y[r] += static_cast<double>(w[r * x.size() + c]) * x[c];
    return y;
  }
  void rotate(std::vector<double>& v, long pos) const {
    const double hd = static_cast<double>(v.size());
    for (std::size_t i = 0; 2 * i + 1 < v.size(); ++i) {
      double freq = std::pow(m_.theta, -2.0 * static_cast<double>(i) / hd);
      if (i < m_.freq_factors.size()) freq /= m_.freq_factors[i];
      const double a = static_cast<double>(pos) * freq, c = std::cos(a), s = std::sin(a);
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = x0 * c - x1 * s;
      v[2 * i + 1] = x0 * s + x1 * c;
    }
  }

  const ReferenceModel& m_;
  int sinks_, window_;
  std::vector<std::vector<std::vector<double>>> keys_, values_;  // [layer][token][kv dim]
};

}  // namespace test
