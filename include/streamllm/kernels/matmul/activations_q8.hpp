// Activations quantised to int8 blocks of 32 (scale d = max|x| / 127), with
// the sum of each block's quants: the integer kernels multiply them with
// int8 / 4-bit weights, and the sums correct for weights stored unsigned.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "streamllm/core/memory.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm::kernels {

struct QuantizedActivations {
  std::size_t rows = 0, cols = 0, blocks = 0;  // blocks per row = cols / 32
  AlignedVector<std::int8_t> q;                // [rows][cols]
  AlignedVector<float> d;                      // [rows][blocks]
  AlignedVector<std::int32_t> sum;             // [rows][blocks]: sum of the block's quants
  AlignedVector<float> dsum;                   // [rows][blocks]: d * sum, what a Q4_K min multiplies
  // Per pair of blocks, as the VNNI kernels consume them (16 lanes, 8 per
  // block): the two scales, and minus the two sums / 8 (see avx512/int8_blocks.hpp).
  std::size_t pairs = 0;
  AlignedVector<float> d_lanes;           // [rows][pairs][16]
  AlignedVector<std::int32_t> sum_lanes;  // [rows][pairs][16]
  // Per group of 16 blocks, for the batched-decode kernel (interleave_groups):
  // the quants interleaved so that lane j (4 bytes) of the group's vector g
  // holds elements 4g..4g+3 of block group_lane_block(j); then the 16 scales
  // and the 16 corrections (interleave_groups) in the same lane order.
  std::size_t groups = 0;
  // Group-major, so that a group's tokens are adjacent for the kernel.
  AlignedVector<std::int8_t> q16;     // [groups][rows][8][16][4]
  AlignedVector<float> d16;           // [groups][rows][16]
  AlignedVector<std::int32_t> sum16;  // [groups][rows][16]

  // The rows from t0 on, as the kernels read them.
  struct Slice {
    const QuantizedActivations* a;
    std::size_t t0;
    std::size_t blocks;
    std::size_t cols() const { return a->cols; }
    const std::int8_t* q_row(std::size_t r) const { return a->q_row(t0 + r); }
    const float* d_row(std::size_t r) const { return a->d_row(t0 + r); }
    const std::int32_t* sum_row(std::size_t r) const { return a->sum_row(t0 + r); }
    const float* dsum_row(std::size_t r) const { return a->dsum_row(t0 + r); }
    const float* d_lanes_row(std::size_t r) const { return a->d_lanes_row(t0 + r); }
    const std::int32_t* sum_lanes_row(std::size_t r) const { return a->sum_lanes_row(t0 + r); }
    // Group G of this slice's first row; the next rows follow (512 and 16 apart).
    const std::int8_t* q16_group(std::size_t G) const { return a->q16.data() + (G * a->rows + t0) * 512; }
    const float* d16_group(std::size_t G) const { return a->d16.data() + (G * a->rows + t0) * 16; }
    const std::int32_t* sum16_group(std::size_t G) const { return a->sum16.data() + (G * a->rows + t0) * 16; }
  };
  Slice slice(std::size_t t0) const { return {this, t0, blocks}; }

  const std::int8_t* q_row(std::size_t r) const { return q.data() + r * cols; }
  const float* d_row(std::size_t r) const { return d.data() + r * blocks; }
  const std::int32_t* sum_row(std::size_t r) const { return sum.data() + r * blocks; }
  const float* dsum_row(std::size_t r) const { return dsum.data() + r * blocks; }
  const float* d_lanes_row(std::size_t r) const { return d_lanes.data() + r * pairs * 16; }
  const std::int32_t* sum_lanes_row(std::size_t r) const { return sum_lanes.data() + r * pairs * 16; }
};

// Round half away from zero, the same way in the scalar and vector code.
inline std::int8_t round_to_int8(float v) { return static_cast<std::int8_t>(std::trunc(v + std::copysign(0.5f, v))); }

// A block holding NaN or Inf: zero quants and a NaN scale, so that every dot
// product with it is NaN (as in float) and no NaN reaches an int conversion.
inline std::pair<float, std::int32_t> non_finite_block(std::int8_t* q) {
  std::fill(q, q + 32, std::int8_t{0});
  return {std::numeric_limits<float>::quiet_NaN(), 0};
}

// The largest magnitude of v[0..n), and whether every value is finite.
struct AbsMax {
  float amax = 0;
  bool finite = true;
};
inline AbsMax abs_max(const float* v, std::size_t n) {
  AbsMax m;
  for (std::size_t j = 0; j < n; ++j) {
    const float a = std::abs(v[j]);
    m.finite = m.finite && a <= std::numeric_limits<float>::max();  // false for NaN
    m.amax = std::max(m.amax, a);
  }
  return m;
}

// One block of 32 quantised with the inverse `id` of its scale: returns the
// sum of its quants.
inline std::int32_t quantize_with_inverse(const float* v, std::int8_t* q, float id) {
  std::int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] = round_to_int8(v[j] * id);
  return s;
}

// One block of 32: quants of at most `limit` either way, and returns
// {scale, sum of quants}.
inline std::pair<float, std::int32_t> quantize_block_to(const float* v, std::int8_t* q, float limit) {
  const AbsMax m = abs_max(v, 32);
  if (!m.finite) return non_finite_block(q);
  const float d = m.amax / limit;
  return {d, quantize_with_inverse(v, q, quant::inverse_or_zero(d))};
}

// One block of 32 as int8 quants (-127..127): the activations of every int8
// row but IQ4's on AVX2 (63, MatmulKernel::activation_limit).
inline std::pair<float, std::int32_t> quantize_block(const float* v, std::int8_t* q) { return quantize_block_to(v, q, 127.0f); }

// Quantises block b of row r with `block` (scalar, or a vector twin with the
// same results), then lays out the per-pair lanes.
template <class BlockFn>
inline void quantize_activations_with(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols,
                                      QuantizedActivations& out, BlockFn&& block) {
  out.rows = rows;
  out.cols = cols;
  out.blocks = cols / 32;
  out.pairs = out.blocks / 2;
  grow(out.q, rows * cols);
  grow(out.d, rows * out.blocks);
  grow(out.sum, rows * out.blocks);
  grow(out.dsum, rows * out.blocks);
  grow(out.d_lanes, rows * out.pairs * 16);
  grow(out.sum_lanes, rows * out.pairs * 16);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t b = 0; b < out.blocks; ++b) {
      const auto [d, s] = block(x + r * ldx + b * 32, out.q.data() + r * cols + b * 32);
      out.d[r * out.blocks + b] = d;
      out.sum[r * out.blocks + b] = s;
      out.dsum[r * out.blocks + b] = d * static_cast<float>(s);
      if (b / 2 < out.pairs)
        for (std::size_t l = 0; l < 8; ++l) {
          const std::size_t at = (r * out.pairs + b / 2) * 16 + (b % 2) * 8 + l;
          out.d_lanes[at] = d;
          out.sum_lanes[at] = -s;
        }
    }
}

using quant::group_lane_block;  // the lane order of the weights' groups (quant/interleaved.hpp)

// Fills the per-group layout (q16, d16, sum16) from q, d and sum; sum16
// holds -sum << shift, the correction for weights stored with an offset of
// 2^shift (the kernels' Row::kGroupShift). `quants(src, dst)` interleaves the
// 512 quants of one group (a vector twin may replace the scalar one).
template <class GroupQuants>
inline void interleave_groups_with(QuantizedActivations& a, int shift, GroupQuants&& quants) {
  a.groups = a.blocks / 16;
  const std::size_t n = a.rows * a.groups;
  grow(a.q16, n * 512);
  grow(a.d16, n * 16);
  grow(a.sum16, n * 16);
  for (std::size_t r = 0; r < a.rows; ++r)
    for (std::size_t G = 0; G < a.groups; ++G) {
      const std::size_t at = G * a.rows + r;
      quants(a.q.data() + r * a.cols + G * 512, a.q16.data() + at * 512);
      for (std::size_t lane = 0; lane < 16; ++lane) {
        const std::size_t b = 16 * G + group_lane_block(lane);
        a.d16[at * 16 + lane] = a.d[r * a.blocks + b];
        a.sum16[at * 16 + lane] = -a.sum[r * a.blocks + b] * (std::int32_t(1) << shift);
      }
    }
}

inline void interleave_group_quants(const std::int8_t* src, std::int8_t* dst) {
  for (std::size_t lane = 0; lane < 16; ++lane)
    for (std::size_t g = 0; g < 8; ++g) std::memcpy(dst + g * 64 + lane * 4, src + group_lane_block(lane) * 32 + 4 * g, 4);
}

inline void interleave_groups(QuantizedActivations& a, int shift) { interleave_groups_with(a, shift, interleave_group_quants); }

// x[rows][ldx] (cols used, a multiple of 32) -> out, quants of at most
// `limit` either way (a row's activation_limit: 127, or 63 for IQ4 on AVX2).
inline void quantize_activations(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols, QuantizedActivations& out,
                                 float limit = 127.0f) {
  quantize_activations_with(x, ldx, rows, cols, out,
                            [limit](const float* v, std::int8_t* q) { return quantize_block_to(v, q, limit); });
}

// The same layout with one scale per 256 (a K-quant super-block: the scale
// of each block of 32 is its super-block's): a kernel can then add the
// integer sums of a super-block's blocks before it scales them, once, where
// a scale per 32 costs each super-block a horizontal reduction of its eight
// blocks' sums. llama.cpp quantises the activations of every K-quant so
// (Q8_K). A super-block holding NaN or Inf gives NaN scales to all its
// blocks. `cols` ends in a partial super-block only for shapes of blocks of
// 32; its last blocks then share one scale.
inline void quantize_activations_per_256(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols,
                                         QuantizedActivations& out, float limit = 127.0f) {
  const float* super = nullptr;  // the super-block whose scale is below
  AbsMax m;
  float d = 0, id = 0;
  quantize_activations_with(x, ldx, rows, cols, out, [&](const float* v, std::int8_t* q) -> std::pair<float, std::int32_t> {
    const auto at = static_cast<std::size_t>(v - x), row = at / ldx, col = at % ldx;
    const float* start = x + row * ldx + col / 256 * 256;
    if (start != super) {
      super = start;
      m = abs_max(start, std::min<std::size_t>(256, cols - col / 256 * 256));
      d = m.amax / limit;
      id = quant::inverse_or_zero(d);
    }
    if (!m.finite) return non_finite_block(q);
    return {d, quantize_with_inverse(v, q, id)};
  });
}

}  // namespace streamllm::kernels
