// What every quantiser shares: rounding, a scale's inverse that cannot be
// Inf, and the value of largest magnitude (whose sign a symmetric grid's
// extra level goes to).
#pragma once

#include <cmath>
#include <limits>

namespace streamllm::quant {

inline int nearest_int(float x) { return static_cast<int>(std::lround(x)); }

// 1/d, or 0 where that is not finite (d = 0, or a subnormal d whose inverse
// overflows): such a block quantises to zeros rather than to x * Inf = NaN.
inline float inverse_or_zero(float d) {
  const float id = 1.0f / d;
  return std::abs(id) <= std::numeric_limits<float>::max() ? id : 0.0f;
}

// The first of v[0..n) with the largest magnitude, with its sign (0 if all are 0).
inline float largest_magnitude(const float* v, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::abs(v[i]) > amax) {
      amax = std::abs(v[i]);
      max = v[i];
    }
  return max;
}

}  // namespace streamllm::quant
