// AVX-512 decode of Q8_0 / Q4_0 rows against int8 activations (VNNI,
// vpdpbusd): pairs of blocks for the blocks past the last group of 16, and
// the groups of 16 blocks that the weights are interleaved into at load
// (quant/interleaved.hpp, repack.hpp), read in streams for one token.
#pragma once

#include "streamllm/kernels/matmul/avx512/float_rows.hpp"
#include "streamllm/kernels/matmul/avx512/isa.hpp"
#include "streamllm/quant/interleaved.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

// ---- Q8_0 / Q4_0 rows x int8 activations (VNNI) -------------------------------
//
// vpdpbusd multiplies unsigned by signed bytes, so weights are made unsigned:
// Q8_0 as q + 128, Q4_0 as its raw nibble (q + 8). The offset times the sum
// of the activation block is taken back by starting each of the block's 8
// int32 lanes from -offset * sum / 8 = -sum << kOffsetShift. Two blocks fill
// a zmm; each half is scaled by its own dw * dx.

STREAMLLM_AVX512 inline __m512 pair_ps(float a, float b) { return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1); }
STREAMLLM_AVX512 inline __m512i pair_epi32(std::int32_t a, std::int32_t b) {
  return _mm512_inserti32x8(_mm512_set1_epi32(a), _mm256_set1_epi32(b), 1);
}
STREAMLLM_AVX512 inline __m512 pair_f16(std::uint16_t a, std::uint16_t b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16(static_cast<short>(a))),
                                                 _mm_set1_epi16(static_cast<short>(b)), 1));
}

// A pair of blocks as the VNNI kernel takes them: 64 unsigned quants, and
// each block's scale in its 8 lanes.
struct QuantsScales {
  __m512i u;
  __m512 d;
};

struct Q8_0Row {
  using Block = quant::BlockQ8_0;
  using Pairs = Q8_0Row;                  // the row type whose pair kernel takes the blocks past the last group
  static constexpr int kOffsetShift = 4;  // offset 128 = 8 lanes x 2^4
  static constexpr int kGroupShift = 7;   // one lane per block (batched kernel): 2^7
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs))),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs)), 1);
    return _mm512_xor_si512(q, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  STREAMLLM_AVX512 static QuantsScales quants_scales_pair(const Block* b) { return {unsigned_pair(b), pair_f16(b[0].d, b[1].d)}; }
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]);
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += b.qs[j] * x[j];
    return s;
  }
};

// Byte and word indices for Q4_0Row: vpermb, vpsrlvw and vpermw operands.
struct Q4_0PairIndex {
  alignas(64) std::uint8_t quants[64];
  alignas(64) std::uint16_t shifts[32];
  alignas(64) std::uint16_t scales[32];
};
constexpr Q4_0PairIndex make_q4_0_pair_index() {
  Q4_0PairIndex x{};
  for (int i = 0; i < 64; ++i) x.quants[i] = static_cast<std::uint8_t>((i / 32) * 18 + 2 + i % 16);  // lanes: qs0 qs0 qs1 qs1
  for (int i = 0; i < 32; ++i) x.shifts[i] = static_cast<std::uint16_t>((i / 8) % 2 ? 4 : 0);        // low, high, low, high
  for (int i = 0; i < 32; ++i) x.scales[i] = static_cast<std::uint16_t>(i < 8 ? 0 : 9);              // words 0 and 9: d0, d1
  return x;
}

// Q4_0 blocks are 18 bytes (scale, then 16 bytes of nibbles: element j in
// the low nibble of byte j, element j + 16 in the high one). A pair is one
// masked 36-byte load; vpermb places each block's nibble bytes twice and a
// per-word shift picks low or high, so the 64 quants come out in element
// order with three operations, and vpermw gathers the two scales.
struct Q4_0Row {
  using Block = quant::BlockQ4_0;
  using Pairs = Q4_0Row;
  static constexpr int kOffsetShift = 0;  // offset 8 = 8 lanes x 2^0
  static constexpr int kGroupShift = 3;   // one lane per block (batched kernel): 2^3
  static constexpr Q4_0PairIndex kIndex = make_q4_0_pair_index();
  STREAMLLM_AVX512 static __m512i load_pair(const Block* b) {
    return _mm512_maskz_loadu_epi8(0xFFFFFFFFFull, b);  // 36 bytes; masked, so never past the end of the row
  }
  STREAMLLM_AVX512 static __m512i unsigned_pair(__m512i raw) {
    const __m512i q = _mm512_permutexvar_epi8(_mm512_load_si512(kIndex.quants), raw);
    return _mm512_and_si512(_mm512_srlv_epi16(q, _mm512_load_si512(kIndex.shifts)), _mm512_set1_epi8(0x0F));
  }
  STREAMLLM_AVX512 static __m512i unsigned_pair(const Block* b) { return unsigned_pair(load_pair(b)); }
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]);
  STREAMLLM_AVX512 static QuantsScales quants_scales_pair(const Block* b) {
    const __m512i raw = load_pair(b);
    const __m512i d = _mm512_permutexvar_epi16(_mm512_load_si512(kIndex.scales), raw);
    return {unsigned_pair(raw), _mm512_cvtph_ps(_mm512_castsi512_si256(d))};
  }
  static std::int32_t scalar_dot(const Block& b, const std::int8_t* x) {
    std::int32_t s = 0;
    for (int j = 0; j < 16; ++j) s += ((b.qs[j] & 0x0F) - 8) * x[j] + ((b.qs[j] >> 4) - 8) * x[j + 16];
    return s;
  }
};

// One token's int8 activations, as the per-pair kernel reads them: held in
// registers across a row instead of recomputed from the Slice each step.
struct PairActivations {
  const std::int8_t* q;
  const float* d;
  const std::int32_t* sum;
};

// One pair of blocks (quants u, scales dw) against a token's pair `pair`,
// added to acc: dw * dx * (u . xq - offset * sum).
template <class Row>
STREAMLLM_AVX512 inline __m512 int8_pair(__m512 acc, __m512i u, __m512 dw, const PairActivations& x, std::size_t pair) {
  const __m512i xq = _mm512_loadu_si512(x.q + pair * 64);
  const __m512 xd = _mm512_load_ps(x.d + pair * 16);
  __m512i corr = _mm512_load_si512(x.sum + pair * 16);
  if constexpr (Row::kOffsetShift != 0) corr = _mm512_slli_epi32(corr, Row::kOffsetShift);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, u, xq)), _mm512_mul_ps(dw, xd), acc);
}

// Row r, blocks [b_begin, b_end), against NT tokens of int8 activations;
// the sums are stored to y, or added to it when `accumulate`. Two pairs of
// blocks per step, each into its own accumulator, hide the dpbusd ->
// convert -> fma latency. b_begin is a multiple of 4; only the row's last
// range may end on an odd block.
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_int8_row(const std::byte* w, std::size_t row_bytes, const QuantizedActivations::Slice& xa,
                                           float* y, std::size_t ldy, std::size_t r, std::size_t b_begin, std::size_t b_end,
                                           bool accumulate) {
  using Block = typename Row::Block;
  const std::size_t nb = b_end;
  __m512 acc0[NT], acc1[NT];
  PairActivations x[NT];
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    acc0[t] = acc1[t] = _mm512_setzero_ps();
    x[t] = {xa.q_row(tt), xa.d_lanes_row(tt), xa.sum_lanes_row(tt)};
  }
  const std::byte* bytes = w + r * row_bytes;
  const Block* row = reinterpret_cast<const Block*>(bytes);
  std::size_t b = b_begin;
  for (; b + 4 <= nb; b += 4) {
    // A line prefetched per 64 bytes consumed keeps kPrefetchBytes in flight
    // (past this row's end: the next row follows in memory).
    if (kPrefetchInt8) prefetch_ahead(bytes + b * sizeof(Block) + kPrefetchBytes, 4 * sizeof(Block));
    const auto [u0, d0] = Row::quants_scales_pair(row + b);
    const auto [u1, d1] = Row::quants_scales_pair(row + b + 2);
#pragma GCC unroll 8  // all NT accumulators in registers
    for (int t = 0; t < NT; ++t) {
      acc0[t] = int8_pair<Row>(acc0[t], u0, d0, x[t], b / 2);
      acc1[t] = int8_pair<Row>(acc1[t], u1, d1, x[t], b / 2 + 1);
    }
  }
  if (b + 2 <= nb) {
    const auto [u0, d0] = Row::quants_scales_pair(row + b);
    for (int t = 0; t < NT; ++t) acc0[t] = int8_pair<Row>(acc0[t], u0, d0, x[t], b / 2);
    b += 2;
  }
  for (int t = 0; t < NT; ++t) {
    const auto tt = static_cast<std::size_t>(t);
    float s = hsum(_mm512_add_ps(acc0[t], acc1[t]));
    if (b < nb)  // an odd last block
      s += f16_to_f32(row[b].d) * xa.d_row(tt)[b] * static_cast<float>(Row::scalar_dot(row[b], xa.q_row(tt) + b * 32));
    y[tt * ldy + r] = accumulate ? y[tt * ldy + r] + s : s;
  }
}

// ---- Decode by groups: one lane per block, 16 blocks at a time -------------
//
// The per-pair scaling above (convert, scale, add for every pair of blocks and
// token) costs more than the dot products, even for one token. Here the
// weights of 16 blocks are transposed once per row so that each lane belongs
// to one block, and the activations are interleaved to match
// (interleave_groups): eight vpdpbusd then finish 16 blocks' dot products for
// a token, and one convert + one fma scale them. The transpose is paid once
// for all the tokens. The per-pair kernel takes the blocks past the last group.

// a[i] = blocks 2i, 2i+1 (8 dwords each, as unsigned_pair loads them) becomes
// a[g] = dword g of the 16 blocks, lane L holding block group_lane_block(L).
// Three butterfly stages, each swapping a bit of the register index with the
// same bit of the lane index.
struct TransposeIndex {
  alignas(64) std::int32_t lo[3][16];
  alignas(64) std::int32_t hi[3][16];
};
constexpr TransposeIndex make_transpose_index() {
  TransposeIndex t{};
  for (int k = 0; k < 3; ++k)
    for (int l = 0; l < 16; ++l) {
      const int bit = 1 << k, from_second = (l & bit) ? 16 : 0;  // lanes with the bit set come from the partner
      t.lo[k][l] = from_second + (l & ~bit);
      t.hi[k][l] = from_second + (l | bit);
    }
  return t;
}
inline constexpr TransposeIndex kTransposeIndex = make_transpose_index();

STREAMLLM_AVX512 inline void transpose_blocks16(__m512i a[8]) {
  for (int k = 0; k < 3; ++k) {
    const int bit = 1 << k;
    const __m512i ilo = _mm512_load_si512(kTransposeIndex.lo[k]), ihi = _mm512_load_si512(kTransposeIndex.hi[k]);
    for (int p = 0; p < 8; ++p) {
      if (p & bit) continue;
      const __m512i x = a[p], y = a[p | bit];
      a[p] = _mm512_permutex2var_epi32(x, ilo, y);
      a[p | bit] = _mm512_permutex2var_epi32(x, ihi, y);
    }
  }
}

// interleave_group_quants, vectorised: the same transpose as the weights'.
STREAMLLM_AVX512 inline void interleave_group_quants_avx512(const std::int8_t* src, std::int8_t* dst) {
  __m512i a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_loadu_si512(src + 64 * i);
  transpose_blocks16(a);
  for (int g = 0; g < 8; ++g) _mm512_store_si512(dst + 64 * g, a[g]);
}

STREAMLLM_AVX512 inline void interleave_groups_avx512(QuantizedActivations& a, int shift) {
  interleave_groups_with(a, shift, interleave_group_quants_avx512);
}

// 16 blocks as the batched kernel takes them: wq[g] lane L holds quants
// 4g..4g+3 of block group_lane_block(L) (unsigned); returns the blocks'
// scales in the same lane order. Generic form: pairs loaded as the one-token
// kernel does, then transposed; Q4_0 has a direct one (Q4_0Row::load_group16).
template <class Row>
STREAMLLM_AVX512 inline __m512 load_group16_transposed(const typename Row::Block* blk, __m512i wq[8]) {
  for (int i = 0; i < 8; ++i) wq[i] = Row::unsigned_pair(blk + 2 * i);
  transpose_blocks16(wq);
  alignas(32) std::uint16_t dh[16];
  for (std::size_t l = 0; l < 16; ++l) dh[l] = blk[group_lane_block(l)].d;
  return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
}

// Byte and word indices for gathering 16 Q4_0 blocks (288 bytes, five
// registers) straight into that layout: for quad g, lane L takes nibble bytes
// 4g..4g+3 of its block; the sources are the register pairs (0,1) and (2,3)
// (vpermt2b, index mod 128) and register 4, merged by masks.
struct Q4_0GroupIndex {
  alignas(64) std::uint8_t quants[4][64];
  std::uint64_t from23[4], from4[4];
  alignas(64) std::uint16_t scales[32];
  std::uint32_t scales_from23, scales_from4;
};
constexpr Q4_0GroupIndex make_q4_0_group_index() {
  Q4_0GroupIndex x{};
  for (int g = 0; g < 4; ++g)
    for (int i = 0; i < 64; ++i) {
      const int offset = 18 * static_cast<int>(group_lane_block(static_cast<std::size_t>(i / 4))) + 2 + 4 * g + i % 4;
      x.quants[g][i] = static_cast<std::uint8_t>(offset % 128);
      if (offset >= 128 && offset < 256) x.from23[g] |= std::uint64_t(1) << i;
      if (offset >= 256) x.from4[g] |= std::uint64_t(1) << i;
    }
  for (int l = 0; l < 16; ++l) {
    const int word = 9 * static_cast<int>(group_lane_block(static_cast<std::size_t>(l)));
    x.scales[l] = static_cast<std::uint16_t>(word % 64);
    if (word >= 64 && word < 128) x.scales_from23 |= 1u << l;
    if (word >= 128) x.scales_from4 |= 1u << l;
  }
  return x;
}
inline constexpr Q4_0GroupIndex kQ4_0Group = make_q4_0_group_index();

STREAMLLM_AVX512 inline __m512 Q8_0Row::load_group16(const Block* b, __m512i wq[8]) {
  return load_group16_transposed<Q8_0Row>(b, wq);
}

STREAMLLM_AVX512 inline __m512 Q4_0Row::load_group16(const Block* b, __m512i wq[8]) {
  const auto* p = reinterpret_cast<const std::byte*>(b);
  const __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128),
                z3 = _mm512_loadu_si512(p + 192), z4 = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p + 256);
  const __m512i m = _mm512_set1_epi8(0x0F);
  for (int g = 0; g < 4; ++g) {
    const __m512i idx = _mm512_load_si512(kQ4_0Group.quants[g]);
    __m512i v = _mm512_permutex2var_epi8(z0, idx, z1);
    v = _mm512_mask_blend_epi8(kQ4_0Group.from23[g], v, _mm512_permutex2var_epi8(z2, idx, z3));
    v = _mm512_mask_blend_epi8(kQ4_0Group.from4[g], v, _mm512_permutexvar_epi8(idx, z4));
    wq[g] = _mm512_and_si512(v, m);
    wq[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
  }
  const __m512i idx = _mm512_load_si512(kQ4_0Group.scales);
  __m512i d = _mm512_permutex2var_epi16(z0, idx, z1);
  d = _mm512_mask_blend_epi16(kQ4_0Group.scales_from23, d, _mm512_permutex2var_epi16(z2, idx, z3));
  d = _mm512_mask_blend_epi16(kQ4_0Group.scales_from4, d, _mm512_permutexvar_epi16(idx, z4));
  return _mm512_cvtph_ps(_mm512_castsi512_si256(d));
}

// Rows interleaved at load (quant/interleaved.hpp): a group is plain loads.
// The blocks past the last group are as in the file, for the pair kernel.
struct Q8_0x16Row : Q8_0Row {
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]) {
    const auto* p = reinterpret_cast<const std::byte*>(b);
    for (int g = 0; g < 8; ++g) wq[g] = _mm512_loadu_si512(p + 64 * g);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 512)));
  }
};
struct Q4_0x16Row : Q4_0Row {
  STREAMLLM_AVX512 static __m512 load_group16(const Block* b, __m512i wq[8]) {
    const auto* p = reinterpret_cast<const std::byte*>(b);
    const __m512i m = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {
      const __m512i v = _mm512_loadu_si512(p + 64 * g);
      wq[g] = _mm512_and_si512(v, m);
      wq[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
    }
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 256)));
  }
};

// quant::interleave_row, a group at a time through the kernels' own loads.
STREAMLLM_AVX512 inline void interleave_row_avx512(DType base, const std::byte* src, std::byte* dst, std::size_t cols) {
  const std::size_t block = quant::quant_bytes(base) + 2, group = quant::kGroupBlocks * block;
  const std::size_t groups = cols / 32 / quant::kGroupBlocks;
  for (std::size_t G = 0; G < groups; ++G) {
    const std::byte* in = src + G * group;
    std::byte* out = dst + G * group;
    __m512i wq[8];
    if (base == DType::Q8_0) {
      Q8_0Row::load_group16(reinterpret_cast<const quant::BlockQ8_0*>(in), wq);
      for (int g = 0; g < 8; ++g) _mm512_storeu_si512(out + 64 * g, wq[g]);
    } else {
      Q4_0Row::load_group16(reinterpret_cast<const quant::BlockQ4_0*>(in), wq);
      for (int g = 0; g < 4; ++g) _mm512_storeu_si512(out + 64 * g, _mm512_or_si512(wq[g], _mm512_slli_epi16(wq[g + 4], 4)));
    }
    for (std::size_t b = 0; b < quant::kGroupBlocks; ++b)
      std::memcpy(out + quant::group_scale_offset(base, b), in + b * block, 2);
  }
  std::memcpy(dst + groups * group, src + groups * group,
              static_cast<std::size_t>(row_bytes(base, static_cast<std::int64_t>(cols))) - groups * group);
}

// Row r, groups [g0, g1) of 16 blocks, against NT tokens; stores the sums,
// or adds them to y when `accumulate`.
template <class Row, int NT>
STREAMLLM_AVX512 inline void gemv_int8_row_groups(const std::byte* w, std::size_t row_bytes,
                                                  const QuantizedActivations::Slice& xa, float* y, std::size_t ldy, std::size_t r,
                                                  std::size_t g0, std::size_t g1, bool accumulate) {
  using Block = typename Row::Block;
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const Block* row = reinterpret_cast<const Block*>(w + r * row_bytes);
  for (std::size_t G = g0; G < g1; ++G) {
    const Block* blk = row + 16 * G;
    // Two rows ahead, at the same column: where the kernel reads next when k
    // is sliced (kPrefetchBytes ahead would land in this row's next slice);
    // 2-4 KB ahead in the stream when k is whole (TinyLlama).
    if (kPrefetchInt8) prefetch_ahead(reinterpret_cast<const std::byte*>(blk) + 2 * row_bytes, 16 * sizeof(Block));
    __m512i wq[8];
    const __m512 dw = Row::load_group16(blk, wq);
    const std::int8_t* xq0 = xa.q16_group(G);
    const float* xd0 = xa.d16_group(G);
    const std::int32_t* xs0 = xa.sum16_group(G);
    // Dot products of the 8 quads, one chain per token, the tokens' chains
    // interleaved so that each step has NT independent vpdpbusd; one token
    // gets two chains, so that 8 vpdpbusd in a row do not wait on each other.
    constexpr int kChains = NT == 1 ? 2 : 1;
    __m512i sum[NT][kChains];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      sum[t][0] = _mm512_load_si512(xs0 + static_cast<std::size_t>(t) * 16);
      if constexpr (kChains == 2) sum[t][1] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        sum[t][g % kChains] =
            _mm512_dpbusd_epi32(sum[t][g % kChains], wq[g],
                                _mm512_load_si512(xq0 + static_cast<std::size_t>(t) * 512 + 64 * static_cast<std::size_t>(g)));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      if constexpr (kChains == 2) sum[t][0] = _mm512_add_epi32(sum[t][0], sum[t][1]);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t][0]),
                               _mm512_mul_ps(dw, _mm512_load_ps(xd0 + static_cast<std::size_t>(t) * 16)), acc[t]);
  }
  for (int t = 0; t < NT; ++t) {
    float& out = y[static_cast<std::size_t>(t) * ldy + r];
    out = accumulate ? out + hsum(acc[t]) : hsum(acc[t]);
  }
}

// One token against rows [r0, r1) in groups of 16 blocks, read as kStream
// sequential streams (the rows of kStream equal parts of the range, side by
// side), each prefetched ahead (kInt8PrefetchBytes), as the float kernels do:
// one core keeps more lines in flight than on one stream (four, as the
// float kernels: eight were no faster, and leave more rows over). Each
// group's activations are loaded once for all the streams. The blocks past the last group and the
// rows past the equal parts go to the kernels above. Where decode_one_stream()
// (Zen 4), one stream and no software prefetch: kStream 1, kPrefetch false.
template <class Row, std::size_t kStream = 4, bool kPrefetch = true>
STREAMLLM_AVX512 inline void gemv_int8_streams(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                               const QuantizedActivations* xa, float* y) {
  using Block = typename Row::Block;
  constexpr std::size_t kGroupBytes = 16 * sizeof(Block);
  const QuantizedActivations::Slice xs = xa->slice(0);
  const std::size_t groups = xa->groups, q = (r1 - r0) / kStream;
  // Row r's blocks past the last group, added to its sum. Taken right after
  // the row's groups, while the stream has them in L1: a pass of its own over
  // every row afterwards found them in L3 at best (a tensor-parallel rank's
  // w_down slice of 2816 columns, 5.5 groups).
  const auto add_blocks_past_groups = [&](std::size_t r) {
    if (16 * groups < xa->blocks) gemv_int8_row<typename Row::Pairs, 1>(w, row_bytes, xs, y, 0, r, 16 * groups, xa->blocks, true);
  };
  for (std::size_t i = 0; i < q; ++i) {
    const std::byte* row[kStream];
    __m512 acc[kStream];
    for (std::size_t s = 0; s < kStream; ++s) {
      row[s] = w + (r0 + s * q + i) * row_bytes;
      acc[s] = _mm512_setzero_ps();
    }
    for (std::size_t G = 0; G < groups; ++G) {
      const std::int8_t* xq = xs.q16_group(G);
      const __m512 xd = _mm512_load_ps(xs.d16_group(G));
      const __m512i xsum = _mm512_load_si512(xs.sum16_group(G));
#pragma GCC unroll 8
      for (std::size_t s = 0; s < kStream; ++s) {
        const std::byte* group = row[s] + G * kGroupBytes;
        if constexpr (kPrefetch) prefetch_ahead(group + kInt8PrefetchBytes, kGroupBytes);
        __m512i wq[8];
        const __m512 dw = Row::load_group16(reinterpret_cast<const Block*>(group), wq);
        __m512i even = xsum, odd = _mm512_setzero_si512();  // two chains: 8 vpdpbusd in a row
#pragma GCC unroll 8
        for (int g = 0; g < 8; g += 2) {
          even = _mm512_dpbusd_epi32(even, wq[g], _mm512_load_si512(xq + 64 * g));
          odd = _mm512_dpbusd_epi32(odd, wq[g + 1], _mm512_load_si512(xq + 64 * g + 64));
        }
        acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), _mm512_mul_ps(dw, xd), acc[s]);
      }
    }
    for (std::size_t s = 0; s < kStream; ++s) {
      const std::size_t r = r0 + s * q + i;
      y[r] = hsum(acc[s]);
      add_blocks_past_groups(r);
    }
  }
  for (std::size_t r = r0 + kStream * q; r < r1; ++r) {
    gemv_int8_row_groups<Row, 1>(w, row_bytes, xs, y, 0, r, 0, groups, false);  // writes 0 when groups == 0
    add_blocks_past_groups(r);
  }
}

// Rows [r0, r1) against n tokens of int8 activations. Each row once for up
// to 8 tokens (it stays in L1 for them), groups of 16 blocks by the kernel
// above, the remaining blocks by the per-pair one. One token goes this way
// too: per 16 blocks, one convert and one fma instead of eight of each.
// Every row reads all
// the tokens' activations, so they must stay in L1 too: long rows (the 5632
// columns of w_down: 56 KB for 8 tokens) go in slices of k, each slice over
// all the rows, which wait in L2 for the next one; so do the rows for the
// next 8 tokens. A row's blocks past its last group follow that group at
// once, while it is in L1: in a pass of their own over every row
// afterwards, they came from L3.
template <class Row>
STREAMLLM_AVX512 inline void gemv_int8_rows(std::size_t r0, std::size_t r1, const std::byte* w, std::size_t row_bytes,
                                            const QuantizedActivations* xa, std::size_t n, float* y, std::size_t ldy) {
  if (n == 1)
    return decode_one_stream() ? gemv_int8_streams<Row, 1, false>(r0, r1, w, row_bytes, xa, y)
                               : gemv_int8_streams<Row>(r0, r1, w, row_bytes, xa, y);
  const std::size_t nb = xa->blocks, groups = xa->groups, grouped = 16 * groups;
  constexpr std::size_t kActivationBytes = 24 << 10, kGroupBytes = 512 + 2 * 16 * 4;
  for (std::size_t t0 = 0; t0 < n; t0 += 8) {  // past 8 tokens, the rows come again from L2
    const std::size_t nt = std::min<std::size_t>(8, n - t0),
                      slice = std::max<std::size_t>(1, kActivationBytes / (nt * kGroupBytes));
    const QuantizedActivations::Slice xs = xa->slice(t0);
    float* yt = y + t0 * ldy;
    for (std::size_t g0 = 0; g0 < groups; g0 += slice) {
      const std::size_t g1 = std::min(groups, g0 + slice);
      const bool rest = g1 == groups && grouped < nb;
      for (std::size_t r = r0; r < r1; ++r)
        with_tokens8(nt, [&]<int NT>() {
          gemv_int8_row_groups<Row, NT>(w, row_bytes, xs, yt, ldy, r, g0, g1, g0 > 0);
          if (rest) gemv_int8_row<typename Row::Pairs, NT>(w, row_bytes, xs, yt, ldy, r, grouped, nb, true);
        });
    }
    if (groups == 0)  // rows shorter than a group
      for (std::size_t r = r0; r < r1; ++r)
        with_tokens8(nt, [&]<int NT>() { gemv_int8_row<typename Row::Pairs, NT>(w, row_bytes, xs, yt, ldy, r, 0, nb, false); });
  }
}

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif  // STREAMLLM_HAVE_AVX512_KERNELS
