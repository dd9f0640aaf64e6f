// IQ4_NL and IQ4_XS (ggml-common.h), byte for byte: 4-bit indices into one
// fixed table of 16 non-uniform levels (denser near zero, where most weights
// are), with a scale per block of 32 (IQ4_NL) or a 6-bit one per block of
// 32 under an f16 super-block scale (IQ4_XS, 256 elements). The decoders
// are ggml's arithmetic; the quantisers are ours.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "streamllm/core/dtype.hpp"
#include "streamllm/quant/quantiser_math.hpp"

namespace streamllm::quant {

// The levels, as int8 so that the int8 kernels multiply them directly.
inline constexpr std::int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

#pragma pack(push, 1)
struct BlockIQ4NL {  // x = d * level[i]; index j in the low nibble of qs[j], j+16 in the high one (Q4_0's order)
  std::uint16_t d;
  std::uint8_t qs[16];
};
struct BlockIQ4XS {  // 8 blocks of 32: x = d * (ls - 32) * level[i], ls 6 bits: 4 in scales_l, 2 in scales_h
  std::uint16_t d;
  std::uint16_t scales_h;
  std::uint8_t scales_l[4];
  std::uint8_t qs[128];  // block b: qs[16 b .. 16 b + 16), IQ4_NL's order
};
#pragma pack(pop)
static_assert(sizeof(BlockIQ4NL) == 18 && sizeof(BlockIQ4XS) == 136);

// Block b's 6-bit scale of an IQ4_XS super-block, 0..63 (the level is ls - 32).
inline int iq4xs_scale(const BlockIQ4XS& x, int b) {
  return ((x.scales_l[b / 2] >> (4 * (b % 2))) & 0xF) | (((x.scales_h >> (2 * b)) & 3) << 4);
}

// 32 elements from 16 bytes of indices at scale d.
inline void dequantize_iq4_32(const std::uint8_t* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

inline void dequantize(const BlockIQ4NL& b, float* y) { dequantize_iq4_32(b.qs, f16_to_f32(b.d), y); }

inline void dequantize(const BlockIQ4XS& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int s = 0; s < 8; ++s) dequantize_iq4_32(b.qs + 16 * s, d * static_cast<float>(iq4xs_scale(b, s) - 32), y + 32 * s);
}

// ---- quantisation -------------------------------------------------------------

// The level nearest to v (in units of the scale).
inline int nearest_iq4_level(float v) {
  if (v <= kIq4Levels[0]) return 0;
  if (v >= kIq4Levels[15]) return 15;
  int i = 0;
  while (kIq4Levels[i + 1] < v) ++i;
  return v - static_cast<float>(kIq4Levels[i]) < static_cast<float>(kIq4Levels[i + 1]) - v ? i : i + 1;
}

// The scale of 32 values on the levels: the grid through the largest
// magnitude stretched a little either way, each try's indices fitted by least
// squares, the best fit kept. Returns the scale (0 for all zeros).
inline float fit_iq4_scale(const float* x) {
  const float max = largest_magnitude(x, 32);
  if (max == 0) return 0;
  float best_d = max / static_cast<float>(kIq4Levels[0]), best = -1;
  for (int t = -7; t <= 7; ++t) {
    const float id = (static_cast<float>(kIq4Levels[0]) + static_cast<float>(t)) / max;
    double xl = 0, ll = 0;
    for (int j = 0; j < 32; ++j) {
      const float l = kIq4Levels[nearest_iq4_level(x[j] * id)];
      xl += static_cast<double>(x[j]) * l;
      ll += static_cast<double>(l) * l;
    }
    // With the least-squares scale xl / ll, the error falls as xl^2 / ll grows.
    if (ll > 0 && xl * xl / ll > best) {
      best = static_cast<float>(xl * xl / ll);
      best_d = static_cast<float>(xl / ll);
    }
  }
  return best_d;
}

// The indices of 32 values at scale d (as the decoder sees it), packed.
inline void pack_iq4_32(const float* x, float d, std::uint8_t* qs) {
  const float id = inverse_or_zero(d);
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<std::uint8_t>(nearest_iq4_level(x[j] * id) | nearest_iq4_level(x[j + 16] * id) << 4);
}

inline void quantize(const float* x, BlockIQ4NL& b) {
  b.d = f32_to_f16(fit_iq4_scale(x));
  pack_iq4_32(x, f16_to_f32(b.d), b.qs);
}

// Each block's scale fitted as IQ4_NL's, then quantised to 6 bits against
// the super-block's largest (that one maps to -32 exactly).
inline void quantize(const float* x, BlockIQ4XS& b) {
  float scale[8];
  for (int s = 0; s < 8; ++s) scale[s] = fit_iq4_scale(x + 32 * s);
  b.d = f32_to_f16(largest_magnitude(scale, 8) / -32.0f);
  const float d = f16_to_f32(b.d), id = inverse_or_zero(d);
  b.scales_h = 0;
  std::memset(b.scales_l, 0, sizeof b.scales_l);
  for (int s = 0; s < 8; ++s) {
    const int ls = std::clamp(static_cast<int>(nearest_int(scale[s] * id)), -32, 31) + 32;
    b.scales_l[s / 2] = static_cast<std::uint8_t>(b.scales_l[s / 2] | (ls & 0xF) << (4 * (s % 2)));
    b.scales_h = static_cast<std::uint16_t>(b.scales_h | (ls >> 4) << (2 * s));
    pack_iq4_32(x + 32 * s, d * static_cast<float>(ls - 32), b.qs + 16 * s);
  }
}

}  // namespace streamllm::quant
