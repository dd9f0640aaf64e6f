// The quantised block layouts of GGUF (ggml-common.h), byte for byte, with a
// plain dequantiser per type (the oracle of every fast kernel) and our own
// quantisers, which write blocks any GGUF reader decodes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "streamllm/core/dtype.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/quant/interleaved.hpp"
#include "streamllm/quant/low_bit_kquants.hpp"
#include "streamllm/quant/nonlinear_blocks.hpp"
#include "streamllm/quant/quantiser_math.hpp"

namespace streamllm::quant {

inline constexpr int kQK = 32;    // elements per Q8_0 / Q4_0 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

#pragma pack(push, 1)
struct BlockQ8_0 {  // x = d * q
  std::uint16_t d;  // fp16
  std::int8_t qs[kQK];
};
struct BlockQ4_0 {  // x = d * (q - 8); element j in the low nibble of qs[j], j+16 in the high one
  std::uint16_t d;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {  // x = d * q + m, nibbles as Q4_0's
  std::uint16_t d, m;
  std::uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {  // x = d * (q - 16): Q4_0's nibbles, bit j of qh the fifth bit of element j
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {  // x = d * q + m, bits as Q5_0's
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
struct BlockQ4K {  // 8 sub-blocks of 32: x = d * sc * q - dmin * m, 6-bit sc and m
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[kQKK / 2];
};
struct BlockQ5K {  // Q4_K with a fifth bit: sub-block 2c + h of chunk c takes bit 2c + h of qh[l]
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[kQKK / 8];
  std::uint8_t qs[kQKK / 2];
};
struct BlockQ6K {  // 16 sub-blocks of 16: x = d * sc * (q - 32), 8-bit sc, 6-bit q
  std::uint8_t ql[kQKK / 2];
  std::uint8_t qh[kQKK / 4];
  std::int8_t scales[kQKK / 16];
  std::uint16_t d;
};
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4K) == 144 && sizeof(BlockQ5K) == 176 && sizeof(BlockQ6K) == 210);

// ---- dequantisation (reference) --------------------------------------------

inline void dequantize(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

inline void dequantize(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 0x0F) - 8);
    y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

inline void dequantize(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(b.qs[j] & 0x0F) + m;
    y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

// The 5-bit quants of a Q5_0 / Q5_1 block, 0..31.
inline void q5_quants(const std::uint8_t* qh4, const std::uint8_t* qs, int* q) {
  std::uint32_t qh;
  std::memcpy(&qh, qh4, sizeof qh);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0x0F) | static_cast<int>((qh >> j) & 1) << 4;
    q[j + kQK / 2] = (qs[j] >> 4) | static_cast<int>((qh >> (j + kQK / 2)) & 1) << 4;
  }
}

inline void dequantize(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  int q[kQK];
  q5_quants(b.qh, b.qs, q);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

inline void dequantize(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  int q[kQK];
  q5_quants(b.qh, b.qs, q);
  for (int j = 0; j < kQK; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

// The 6-bit scale and min of sub-block j of a Q4_K block.
inline void q4k_scale_min(int j, const std::uint8_t* s, std::uint8_t& sc, std::uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// All eight at once, with 32-bit words: byte j of `scales` and of `mins` is
// sub-block j's (on a little-endian CPU; the SIMD kernels' use).
struct Q4KScalesMins {
  std::uint64_t scales, mins;
};
inline Q4KScalesMins q4k_scales_mins_bytes(const std::uint8_t* s) {
  std::uint32_t w[3];
  std::memcpy(w, s, sizeof w);
  const std::uint32_t sc_lo = w[0] & 0x3f3f3f3f, m_lo = w[1] & 0x3f3f3f3f;
  const std::uint32_t sc_hi = (w[2] & 0x0f0f0f0f) | (((w[0] >> 6) & 0x03030303) << 4);
  const std::uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0f) | (((w[1] >> 6) & 0x03030303) << 4);
  return {sc_lo | std::uint64_t{sc_hi} << 32, m_lo | std::uint64_t{m_hi} << 32};
}

inline void dequantize(const BlockQ4K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const std::uint8_t* q = b.qs;
  for (int j = 0; j < kQKK; j += 64, q += 32) {
    std::uint8_t sc, m;
    q4k_scale_min(j / 32, b.scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(j / 32 + 1, b.scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

inline void dequantize(const BlockQ5K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  const std::uint8_t* q = b.qs;
  for (int j = 0, c = 0; j < kQKK; j += 64, q += 32, ++c) {
    std::uint8_t sc, m;
    q4k_scale_min(j / 32, b.scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    q4k_scale_min(j / 32 + 1, b.scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[j + l] = d1 * static_cast<float>((q[l] & 0x0F) | ((b.qh[l] >> (2 * c)) & 1) << 4) - m1;
    for (int l = 0; l < 32; ++l) y[j + 32 + l] = d2 * static_cast<float>((q[l] >> 4) | ((b.qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
  }
}

inline void dequantize(const BlockQ6K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const std::uint8_t* ql = b.ql;
  const std::uint8_t* qh = b.qh;
  const std::int8_t* sc = b.scales;
  for (int n = 0; n < kQKK; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[n + l] = d * sc[is] * static_cast<float>(q1);
      y[n + l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[n + l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[n + l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
  }
}

template <class Block, int N>
inline void dequantize_blocks(const std::byte* src, std::int64_t cols, float* y) {
  for (std::int64_t b = 0; b < cols / N; ++b) dequantize(reinterpret_cast<const Block*>(src)[b], y + b * N);
}

// One row of `cols` elements of any type to f32.
inline void dequantize_row(DType t, const std::byte* src, std::int64_t cols, float* y) {
  switch (t) {
    case DType::F32: std::memcpy(y, src, static_cast<std::size_t>(cols) * sizeof(float)); return;
    case DType::F16:
      for (std::int64_t i = 0; i < cols; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        y[i] = f16_to_f32(h);
      }
      return;
    case DType::BF16:
      for (std::int64_t i = 0; i < cols; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        y[i] = bf16_to_f32(h);
      }
      return;
    case DType::Q8_0: return dequantize_blocks<BlockQ8_0, kQK>(src, cols, y);
    case DType::Q4_0: return dequantize_blocks<BlockQ4_0, kQK>(src, cols, y);
    case DType::Q4_1: return dequantize_blocks<BlockQ4_1, kQK>(src, cols, y);
    case DType::Q5_0: return dequantize_blocks<BlockQ5_0, kQK>(src, cols, y);
    case DType::Q5_1: return dequantize_blocks<BlockQ5_1, kQK>(src, cols, y);
    case DType::Q4_K: return dequantize_blocks<BlockQ4K, kQKK>(src, cols, y);
    case DType::Q5_K: return dequantize_blocks<BlockQ5K, kQKK>(src, cols, y);
    case DType::Q6_K: return dequantize_blocks<BlockQ6K, kQKK>(src, cols, y);
    case DType::Q2_K: return dequantize_blocks<BlockQ2K, kQKK>(src, cols, y);
    case DType::Q3_K: return dequantize_blocks<BlockQ3K, kQKK>(src, cols, y);
    case DType::IQ4_NL: return dequantize_blocks<BlockIQ4NL, kQK>(src, cols, y);
    case DType::IQ4_XS: return dequantize_blocks<BlockIQ4XS, kQKK>(src, cols, y);
    case DType::Q8_0x16:
    case DType::Q4_0x16: {
      // A group at a time back to its blocks; the tail is blocks already.
      constexpr std::int64_t kGroupCols = kGroupBlocks * kQK;
      const DType base = base_type(t);
      const std::int64_t groups = cols / kGroupCols, group_bytes = row_bytes(base, kGroupCols);
      alignas(64) std::byte blocks[kGroupBlocks * sizeof(BlockQ8_0)];
      for (std::int64_t G = 0; G < groups; ++G) {
        deinterleave_row(base, src + G * group_bytes, blocks, kGroupCols);
        dequantize_row(base, blocks, kGroupCols, y + G * kGroupCols);
      }
      dequantize_row(base, src + groups * group_bytes, cols - groups * kGroupCols, y + groups * kGroupCols);
      return;
    }
  }
}

// ---- quantisation (ours) ----------------------------------------------------

// Symmetric 8-bit: d = max|x| / 127.
inline void quantize(const float* x, BlockQ8_0& b) {
  float amax = 0;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::abs(x[j]));
  const float d = amax / 127.0f, id = inverse_or_zero(d);
  b.d = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<std::int8_t>(std::clamp(nearest_int(x[j] * id), -127, 127));
}

// 4-bit with the largest-magnitude value mapped to -8 exactly, so its sign
// gets the extra level.
inline void quantize(const float* x, BlockQ4_0& b) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j)
    if (std::abs(x[j]) > amax) {
      amax = std::abs(x[j]);
      max = x[j];
    }
  const float d = max / -8.0f, id = inverse_or_zero(d);
  b.d = f32_to_f16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = std::clamp(static_cast<int>(x[j] * id + 8.5f), 0, 15);
    const int hi = std::clamp(static_cast<int>(x[j + kQK / 2] * id + 8.5f), 0, 15);
    b.qs[j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

// Q4_1 / Q5_1: an affine grid of Levels + 1 steps from the block's minimum
// to its maximum, quantised against d and m as the decoder will see them.
template <int Levels>
inline void quantize_affine_block(const float* x, std::uint16_t& d16, std::uint16_t& m16, int* q) {
  const float lo = *std::min_element(x, x + kQK), hi = *std::max_element(x, x + kQK);
  d16 = f32_to_f16((hi - lo) / Levels);
  m16 = f32_to_f16(lo);
  const float d = f16_to_f32(d16), m = f16_to_f32(m16), id = inverse_or_zero(d);
  for (int j = 0; j < kQK; ++j) q[j] = std::clamp(nearest_int((x[j] - m) * id), 0, Levels);
}

inline void quantize(const float* x, BlockQ4_1& b) {
  int q[kQK];
  quantize_affine_block<15>(x, b.d, b.m, q);
  for (int j = 0; j < kQK / 2; ++j) b.qs[j] = static_cast<std::uint8_t>(q[j] | q[j + kQK / 2] << 4);
}

// The low nibbles of 32 5-bit quants into qs (Q4_0's order), the fifth bits into qh.
inline void pack_q5(const int* q, std::uint8_t* qh4, std::uint8_t* qs) {
  std::uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<std::uint8_t>((q[j] & 0x0F) | (q[j + kQK / 2] & 0x0F) << 4);
    qh |= static_cast<std::uint32_t>(q[j] >> 4) << j | static_cast<std::uint32_t>(q[j + kQK / 2] >> 4) << (j + kQK / 2);
  }
  std::memcpy(qh4, &qh, sizeof qh);
}

inline void quantize(const float* x, BlockQ5_1& b) {
  int q[kQK];
  quantize_affine_block<31>(x, b.d, b.m, q);
  pack_q5(q, b.qh, b.qs);
}

// Q5_0 as Q4_0: the largest-magnitude value mapped to -16 exactly.
inline void quantize(const float* x, BlockQ5_0& b) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQK; ++j)
    if (std::abs(x[j]) > amax) {
      amax = std::abs(x[j]);
      max = x[j];
    }
  b.d = f32_to_f16(max / -16.0f);
  const float id = inverse_or_zero(f16_to_f32(b.d));
  int q[kQK];
  for (int j = 0; j < kQK; ++j) q[j] = std::clamp(nearest_int(x[j] * id) + 16, 0, 31);
  pack_q5(q, b.qh, b.qs);
}

// Q4_K / Q5_K: per sub-block of 32 an affine grid of Levels + 1 steps over
// [min(0, lo), hi]; the 8 scales and 8 mins are then quantised to 6 bits
// against the super-block's largest and packed as the format packs them.
// q gets the quants (0..Levels) against the scales as the decoder sees them.
template <int Levels>
inline void quantize_k_affine(const float* x, std::uint16_t& d16, std::uint16_t& dmin16, std::uint8_t* scales, std::uint8_t* q) {
  float scale[8], minv[8], max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* v = x + 32 * s;
    const float lo = std::min(0.0f, *std::min_element(v, v + 32));
    const float hi = *std::max_element(v, v + 32);
    scale[s] = (hi - lo) / Levels;
    minv[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, minv[s]);
  }
  const float d = max_scale / 63.0f, dmin = max_min / 63.0f;
  std::uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = static_cast<std::uint8_t>(d > 0 ? std::clamp(nearest_int(scale[s] / d), 0, 63) : 0);
    lm[s] = static_cast<std::uint8_t>(dmin > 0 ? std::clamp(nearest_int(minv[s] / dmin), 0, 63) : 0);
  }
  d16 = f32_to_f16(d);
  dmin16 = f32_to_f16(dmin);
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<std::uint8_t>((ls[j] & 0x0F) | ((lm[j] & 0x0F) << 4));
      scales[j - 4] |= static_cast<std::uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<std::uint8_t>((lm[j] >> 4) << 6);
    }
  }
  const float df = f16_to_f32(d16), mf = f16_to_f32(dmin16);
  for (int s = 0; s < 8; ++s) {
    std::uint8_t sc, m;
    q4k_scale_min(s, scales, sc, m);
    const float ds = df * sc, ms = mf * m;
    for (int l = 0; l < 32; ++l)
      q[32 * s + l] = static_cast<std::uint8_t>(ds > 0 ? std::clamp(nearest_int((x[32 * s + l] + ms) / ds), 0, Levels) : 0);
  }
}

inline void quantize(const float* x, BlockQ4K& b) {
  std::uint8_t q[kQKK];
  quantize_k_affine<15>(x, b.d, b.dmin, b.scales, q);
  for (int j = 0; j < kQKK; j += 64)
    for (int l = 0; l < 32; ++l) b.qs[j / 2 + l] = static_cast<std::uint8_t>(q[j + l] | (q[j + 32 + l] << 4));
}

inline void quantize(const float* x, BlockQ5K& b) {
  std::uint8_t q[kQKK];
  quantize_k_affine<31>(x, b.d, b.dmin, b.scales, q);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int j = 0, c = 0; j < kQKK; j += 64, ++c)
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t lo = q[j + l], hi = q[j + 32 + l];
      b.qs[j / 2 + l] = static_cast<std::uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
      b.qh[l] = static_cast<std::uint8_t>(b.qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
    }
}

// Q6_K: per sub-block of 16 a symmetric 6-bit grid, its scale quantised to
// int8 against the super-block's largest.
inline void quantize(const float* x, BlockQ6K& b) {
  float scale[16], max_abs_scale = 0, max_scale = 0;
  for (int s = 0; s < 16; ++s) {
    float amax = 0, max = 0;
    for (int l = 0; l < 16; ++l)
      if (std::abs(x[16 * s + l]) > amax) {
        amax = std::abs(x[16 * s + l]);
        max = x[16 * s + l];
      }
    scale[s] = max / -32.0f;
    if (std::abs(scale[s]) > max_abs_scale) {
      max_abs_scale = std::abs(scale[s]);
      max_scale = scale[s];
    }
  }
  const float iscale = max_scale != 0 && std::isfinite(-128.0f / max_scale) ? -128.0f / max_scale : 0.0f;
  b.d = f32_to_f16(iscale != 0 ? 1.0f / iscale : 0.0f);
  const float d = f16_to_f32(b.d);
  std::uint8_t q[kQKK];
  for (int s = 0; s < 16; ++s) {
    b.scales[s] = static_cast<std::int8_t>(std::clamp(nearest_int(iscale * scale[s]), -128, 127));
    const float ds = d * b.scales[s];
    for (int l = 0; l < 16; ++l)
      q[16 * s + l] = static_cast<std::uint8_t>(ds != 0 ? std::clamp(nearest_int(x[16 * s + l] / ds), -32, 31) + 32 : 32);
  }
  for (int n = 0; n < kQKK; n += 128) {
    std::uint8_t* ql = b.ql + n / 2;
    std::uint8_t* qh = b.qh + n / 4;
    for (int l = 0; l < 32; ++l) {
      const std::uint8_t q1 = q[n + l], q2 = q[n + l + 32], q3 = q[n + l + 64], q4 = q[n + l + 96];
      ql[l] = static_cast<std::uint8_t>((q1 & 0x0F) | ((q3 & 0x0F) << 4));
      ql[l + 32] = static_cast<std::uint8_t>((q2 & 0x0F) | ((q4 & 0x0F) << 4));
      qh[l] = static_cast<std::uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

// The largest magnitude a row may hold for type t: F16 and the block types
// (whose scales are f16) stop at f16's largest finite value.
inline float largest_storable(DType t) {
  return t == DType::F32 || t == DType::BF16 ? std::numeric_limits<float>::max() : 65504.0f;
}

template <class Block, int N>
inline void quantize_blocks(const float* x, std::int64_t cols, std::byte* dst) {
  for (std::int64_t b = 0; b < cols / N; ++b) quantize(x + b * N, reinterpret_cast<Block*>(dst)[b]);
}

// One row of `cols` f32 values to any type (cols a multiple of its block).
// Throws InputError for a value that is NaN, infinite, or too large for t,
// naming its column: the quantisers assume finite input, and an Inf scale or
// weight is no model.
inline void quantize_row(DType t, const float* x, std::int64_t cols, std::byte* dst) {
  const float limit = largest_storable(t);
  for (std::int64_t i = 0; i < cols; ++i)
    if (!(std::abs(x[i]) <= limit))
      throw InputError("quantize to " + std::string(dtype_name(t)) + ": value " + std::to_string(x[i]) + " in column " +
                       std::to_string(i) + (std::isfinite(x[i]) ? " is beyond the type's range" : " is not finite"));
  switch (t) {
    case DType::F32: std::memcpy(dst, x, static_cast<std::size_t>(cols) * sizeof(float)); return;
    case DType::F16:
      for (std::int64_t i = 0; i < cols; ++i) {
        const std::uint16_t h = f32_to_f16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (std::int64_t i = 0; i < cols; ++i) {
        const std::uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0: return quantize_blocks<BlockQ8_0, kQK>(x, cols, dst);
    case DType::Q4_0: return quantize_blocks<BlockQ4_0, kQK>(x, cols, dst);
    case DType::Q4_1: return quantize_blocks<BlockQ4_1, kQK>(x, cols, dst);
    case DType::Q5_0: return quantize_blocks<BlockQ5_0, kQK>(x, cols, dst);
    case DType::Q5_1: return quantize_blocks<BlockQ5_1, kQK>(x, cols, dst);
    case DType::Q4_K: return quantize_blocks<BlockQ4K, kQKK>(x, cols, dst);
    case DType::Q5_K: return quantize_blocks<BlockQ5K, kQKK>(x, cols, dst);
    case DType::Q6_K: return quantize_blocks<BlockQ6K, kQKK>(x, cols, dst);
    case DType::Q2_K: return quantize_blocks<BlockQ2K, kQKK>(x, cols, dst);
    case DType::Q3_K: return quantize_blocks<BlockQ3K, kQKK>(x, cols, dst);
    case DType::IQ4_NL: return quantize_blocks<BlockIQ4NL, kQK>(x, cols, dst);
    case DType::IQ4_XS: return quantize_blocks<BlockIQ4XS, kQKK>(x, cols, dst);
    case DType::Q8_0x16:
    case DType::Q4_0x16: {
      std::vector<std::byte> blocks(static_cast<std::size_t>(row_bytes(t, cols)));
      quantize_row(base_type(t), x, cols, blocks.data());
      interleave_row(base_type(t), blocks.data(), dst, cols);
      return;
    }
  }
}

}  // namespace streamllm::quant
