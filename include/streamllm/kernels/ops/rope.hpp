// Rotary position embedding (Su et al. 2021, RoFormer), in the adjacent-pair
// layout of llama2.c and GGUF llama files: the pair (x[2i], x[2i+1]) of every
// head is rotated by the angle pos * theta^(-2i / head_dim).
//
// As a file may say (RopeScaling): each frequency divided by its factor
// (rope_freqs.weight: Llama 3.1/3.2's long-context "llama3" scaling, as
// ggml applies it), every position scaled (linear scaling), and only the
// first rotary_dims of a head rotated (the others pass unchanged).
//
// Angles are computed in double and only their cos/sin are rounded to float:
// at position 10^6 a float angle would already be off by ~0.06 rad.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "streamllm/kernels/simd/vec.hpp"

namespace streamllm::kernels {

struct RopeScaling {
  std::vector<double> freq_factors;  // empty, or one per rotated pair: its frequency is divided by it
  double position_scale = 1.0;       // linear scaling: angles of position p * position_scale
  int rotary_dims = 0;               // 0: the whole head
};

// Frequencies of one head, and the cos/sin tables the rotation kernels read.
// A table is expanded per element (c0 c0 c1 c1 ..., -s0 s0 -s1 s1 ...) and
// repeated to at least the widest family's vector (kMaxLanes), so that the
// kernel is one FMA pair per vector whatever the head size.
class Rope {
 public:
  Rope(int head_dim, double theta, const RopeScaling& scaling = {}) : head_dim_(head_dim), theta_(theta) {
    const int rotary = scaling.rotary_dims > 0 ? scaling.rotary_dims : head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      double f = 0;  // a pair past the rotary dimensions: angle 0, unchanged
      if (2 * i < rotary) {
        f = std::pow(theta, -2.0 * i / static_cast<double>(rotary)) * scaling.position_scale;
        if (static_cast<std::size_t>(i) < scaling.freq_factors.size()) f /= scaling.freq_factors[static_cast<std::size_t>(i)];
      }
      inv_freq_.push_back(f);
    }
    table_len_ = head_dim;
    if (head_dim < static_cast<int>(kMaxLanes) && kMaxLanes % static_cast<std::size_t>(head_dim) == 0)
      table_len_ = static_cast<int>(kMaxLanes);
  }

  int head_dim() const { return head_dim_; }
  double theta() const { return theta_; }
  int table_len() const { return table_len_; }

  // Tables that rotate by `pos` (any integer, negative included).
  void table(std::int64_t pos, float* cosx, float* sinx) const {
    for (int i = 0; i < head_dim_ / 2; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq_[static_cast<std::size_t>(i)];
      const float c = static_cast<float>(std::cos(angle));
      const float s = static_cast<float>(std::sin(angle));
      cosx[2 * i] = c;
      cosx[2 * i + 1] = c;
      sinx[2 * i] = -s;
      sinx[2 * i + 1] = s;
    }
    for (int j = head_dim_; j < table_len_; ++j) {
      cosx[j] = cosx[j % head_dim_];
      sinx[j] = sinx[j % head_dim_];
    }
  }

 private:
  int head_dim_;
  double theta_;
  int table_len_;
  std::vector<double> inv_freq_;
};

namespace scalar {
// Rotates n values (whole heads) with a table from Rope::table.
inline void rope_apply(float* x, std::size_t n, const float* cosx, const float* sinx, std::size_t table_len) {
  for (std::size_t e = 0; e + 1 < n; e += 2) {
    const std::size_t t = e % table_len;
    const float c = cosx[t], s = sinx[t + 1];
    const float x0 = x[e], x1 = x[e + 1];
    x[e] = x0 * c - x1 * s;
    x[e + 1] = x0 * s + x1 * c;
  }
}

// The textbook form, straight from the paper: the oracle of the table path.
inline void rope_rotate(float* x, std::size_t n, int head_dim, std::int64_t pos, double theta) {
  for (std::size_t e = 0; e + 1 < n; e += 2) {
    const std::size_t i = (e % static_cast<std::size_t>(head_dim)) / 2;
    const double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = x[e], x1 = x[e + 1];
    x[e] = static_cast<float>(x0 * c - x1 * s);
    x[e + 1] = static_cast<float>(x0 * s + x1 * c);
  }
}
// Re-rotation by delta, in the textbook form: the twin of rope_rerotate.
inline void rope_rerotate(float* x, std::size_t n, int head_dim, std::int64_t delta, double theta) {
  rope_rotate(x, n, head_dim, delta, theta);
}
}  // namespace scalar

}  // namespace streamllm::kernels

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/ops/rope-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"

namespace streamllm::kernels {

// Rotates n values (whole heads) with a table from Rope::table.
inline void rope_apply(float* x, std::size_t n, const float* cosx, const float* sinx, std::size_t table_len) {
  STREAMLLM_ON_ACTIVE_ISA(rope_apply(x, n, cosx, sinx, table_len));
}

// The re-rotation helper: keys (or queries) that were rotated at position p are
// made to read as if rotated at p + delta. Rotations compose, so this is one
// rotation by delta; exact for any delta, negative included.
inline void rope_rerotate(const Rope& rope, float* x, std::size_t n, std::int64_t delta, float* cos_scratch, float* sin_scratch) {
  rope.table(delta, cos_scratch, sin_scratch);
  rope_apply(x, n, cos_scratch, sin_scratch, static_cast<std::size_t>(rope.table_len()));
}

}  // namespace streamllm::kernels
