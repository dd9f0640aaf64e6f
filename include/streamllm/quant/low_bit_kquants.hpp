// Q2_K and Q3_K (ggml-common.h), byte for byte: super-blocks of 256 in 16
// blocks of 16, 2-bit quants with a 4-bit scale and min per block (Q2_K),
// or 3-bit quants (2 bits in qs, the third in hmask) with a 6-bit signed
// scale per block (Q3_K). The decoders are ggml's arithmetic; the
// quantisers are ours.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "streamllm/core/dtype.hpp"
#include "streamllm/quant/quantiser_math.hpp"

namespace streamllm::quant {

#pragma pack(push, 1)
struct BlockQ2K {  // x = d * (sc & 15) * q - dmin * (sc >> 4), block of 16 elements each
  std::uint8_t scales[16];
  std::uint8_t qs[64];  // element 128 h + 32 c + l: bits 2c of qs[32 h + l]
  std::uint16_t d, dmin;
};
struct BlockQ3K {           // x = d * (sc - 32) * (q - 4), q = 2 bits of qs + 4 x the bit of hmask
  std::uint8_t hmask[32];   // element e: bit e / 32 of hmask[e % 32]
  std::uint8_t qs[64];      // as Q2_K's
  std::uint8_t scales[12];  // 16 6-bit scales: low nibbles in bytes 0-7, high pairs in 8-11
  std::uint16_t d;
};
#pragma pack(pop)
static_assert(sizeof(BlockQ2K) == 84 && sizeof(BlockQ3K) == 110);

// The 2-bit field of element e (0..255) in a Q2_K / Q3_K qs.
inline int low2_bits(const std::uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// The sixteen 6-bit scales of a Q3_K super-block, 0..63.
inline void q3k_scales(const std::uint8_t* packed, int* sc) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    sc[j] = low | high << 4;
  }
}

inline void dequantize(const BlockQ2K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(b.scales[s] & 0xF), ml = dmin * static_cast<float>(b.scales[s] >> 4);
    for (int l = 0; l < 16; ++l) y[16 * s + l] = dl * static_cast<float>(low2_bits(b.qs, 16 * s + l)) - ml;
  }
}

inline void dequantize(const BlockQ3K& b, float* y) {
  const float d = f16_to_f32(b.d);
  int sc[16];
  q3k_scales(b.scales, sc);
  for (int s = 0; s < 16; ++s) {
    const float dl = d * static_cast<float>(sc[s] - 32);
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * s + l, high = (b.hmask[e % 32] >> (e / 32)) & 1;
      y[e] = dl * static_cast<float>(low2_bits(b.qs, e) - (high ? 0 : 4));
    }
  }
}

// ---- quantisation -------------------------------------------------------------

// 256 values of 0..3 into a qs of Q2_K's order.
inline void pack_low2_bits(const std::uint8_t* q, std::uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l)
      qs[32 * h + l] = static_cast<std::uint8_t>(q[128 * h + l] | q[128 * h + 32 + l] << 2 | q[128 * h + 64 + l] << 4 |
                                                 q[128 * h + 96 + l] << 6);
}

// x ~ scale q - min for 16 values, q in 0..3, scale and min >= 0: the grid
// over [min(0, lo), hi] first, then a few rounds of assigning the quants and
// refitting scale and min by least squares (four levels leave the grid's
// ends far from most values: the refit lowers the RMS error on normal
// weights by about a tenth).
inline void fit_q2_block(const float* v, float& scale, float& min) {
  const float lo = std::min(0.0f, *std::min_element(v, v + 16)), hi = *std::max_element(v, v + 16);
  scale = (hi - lo) / 3;
  min = -lo;
  for (int round = 0; round < 4 && scale > 0; ++round) {
    double sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int l = 0; l < 16; ++l) {
      const int q = std::clamp(nearest_int((v[l] + min) / scale), 0, 3);
      sl += q;
      sll += q * q;
      sx += v[l];
      sxl += static_cast<double>(v[l]) * q;
    }
    const double det = 16 * sll - sl * sl;
    if (det <= 0) break;
    double a = (16 * sxl - sl * sx) / det, c = (sx - a * sl) / 16;  // x ~ a q + c
    if (c > 0) {                                                    // the min is an offset below zero only
      c = 0;
      a = sll > 0 ? sxl / sll : 0;
    }
    if (a <= 0) break;
    scale = static_cast<float>(a);
    min = static_cast<float>(-c);
  }
}

// Per block of 16 a fitted affine grid of 4 steps; scales and mins
// quantised to 4 bits against the super-block's largest; the quants against
// them as the decoder sees them.
inline void quantize(const float* x, BlockQ2K& b) {
  float scale[16], minv[16], max_scale = 0, max_min = 0;
  for (int s = 0; s < 16; ++s) {
    fit_q2_block(x + 16 * s, scale[s], minv[s]);
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, minv[s]);
  }
  b.d = f32_to_f16(max_scale / 15);
  b.dmin = f32_to_f16(max_min / 15);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  std::uint8_t q[256];
  for (int s = 0; s < 16; ++s) {
    const int ls = d > 0 ? std::clamp(nearest_int(scale[s] / d), 0, 15) : 0;
    const int lm = dmin > 0 ? std::clamp(nearest_int(minv[s] / dmin), 0, 15) : 0;
    b.scales[s] = static_cast<std::uint8_t>(ls | lm << 4);
    const float dl = d * static_cast<float>(ls), ml = dmin * static_cast<float>(lm);
    for (int l = 0; l < 16; ++l)
      q[16 * s + l] = static_cast<std::uint8_t>(dl > 0 ? std::clamp(nearest_int((x[16 * s + l] + ml) / dl), 0, 3) : 0);
  }
  pack_low2_bits(q, b.qs);
}

// The scale of 16 values on the levels -4..3: the grid whose largest
// magnitude maps to -4, stretched a little either way, each try's quants
// fitted by least squares, the best fit kept.
inline float fit_q3_block(const float* v) {
  const float m = largest_magnitude(v, 16);
  if (m == 0) return 0;
  float best_scale = m / -4.0f;
  double best = -1;
  for (int t = -5; t <= 5; ++t) {
    const float id = (-4.0f + 0.1f * static_cast<float>(t)) / m;
    double xl = 0, ll = 0;
    for (int l = 0; l < 16; ++l) {
      const int q = std::clamp(nearest_int(v[l] * id), -4, 3);
      xl += static_cast<double>(v[l]) * q;
      ll += q * q;
    }
    if (ll > 0 && xl * xl / ll > best) {  // the least-squares scale xl / ll; its error falls as this grows
      best = xl * xl / ll;
      best_scale = static_cast<float>(xl / ll);
    }
  }
  return best_scale;
}

// Per block of 16 a fitted symmetric grid; the scales quantised to 6 bits
// against the super-block's largest (mapped to -32); the quants against
// them as the decoder sees them.
inline void quantize(const float* x, BlockQ3K& b) {
  float scale[16];
  for (int s = 0; s < 16; ++s) scale[s] = fit_q3_block(x + 16 * s);
  b.d = f32_to_f16(largest_magnitude(scale, 16) / -32.0f);
  const float d = f16_to_f32(b.d), id = inverse_or_zero(d);
  std::memset(b.scales, 0, sizeof b.scales);
  std::memset(b.hmask, 0, sizeof b.hmask);
  std::uint8_t q[256];
  for (int s = 0; s < 16; ++s) {
    const int ls = std::clamp(nearest_int(scale[s] * id), -32, 31) + 32;
    if (s < 8)
      b.scales[s] = static_cast<std::uint8_t>(ls & 0xF);
    else
      b.scales[s - 8] = static_cast<std::uint8_t>(b.scales[s - 8] | (ls & 0xF) << 4);
    b.scales[8 + s % 4] = static_cast<std::uint8_t>(b.scales[8 + s % 4] | (ls >> 4) << (2 * (s / 4)));
    const float dl = d * static_cast<float>(ls - 32), il = inverse_or_zero(dl);
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * s + l, v = std::clamp(nearest_int(x[e] * il), -4, 3) + 4;
      q[e] = static_cast<std::uint8_t>(v & 3);
      if (v > 3) b.hmask[e % 32] = static_cast<std::uint8_t>(b.hmask[e % 32] | 1 << (e / 32));
    }
  }
  pack_low2_bits(q, b.qs);
}

}  // namespace streamllm::quant
