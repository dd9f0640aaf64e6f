// The int8 tiles (int8_tiles.hpp) over Q8_0 and Q4_0 rows repacked into
// groups of 16 blocks at load (Q8_0x16, Q4_0x16: quant/interleaved.hpp).
//
// The tiles unpack each block of rows before use. Unpacked into the file's
// block order, a group cost a transpose (24 vpermt2d) and a sum per block,
// as long as 32 tokens' products, so short prefills (chat turns) went to
// the decode kernels, at a third of the VNNI peak. Unpacked in the group's own lane order (Int8Groups), a group is
// its eight vectors less the offset, the 16 blocks' sums in one vpdpbusd
// chain, and the scales as loaded: no transpose, nothing scalar.
#pragma once

#include "streamllm/kernels/matmul/avx512/int8_tiles.hpp"
#include "streamllm/kernels/matmul/prefetch_rows.hpp"

#ifdef STREAMLLM_HAVE_AVX512_KERNELS

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "streamllm/core/error.hpp"
#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/quant/interleaved.hpp"

STREAMLLM_BEGIN_AVX512_INTRINSICS

namespace streamllm::kernels::avx512 {

inline constexpr std::size_t kGroupCols = 32 * quant::kGroupBlocks;

// One group of an interleaved row as Int8Groups lays it out: signed quants,
// the blocks' scales and -128 x each block's sum, in lane order.
STREAMLLM_AVX512 inline void unpack_group_lanes(DType base, const std::byte* group, std::int8_t* q, std::byte* scales,
                                                std::byte* corrections) {
  __m512i v[8];  // quad g of each block, unsigned (Q8_0: q + 128; Q4_0: q + 8)
  const __m512 dw = base == DType::Q8_0 ? Q8_0x16Row::load_group16(reinterpret_cast<const quant::BlockQ8_0*>(group), v)
                                        : Q4_0x16Row::load_group16(reinterpret_cast<const quant::BlockQ4_0*>(group), v);
  const __m512i offset = _mm512_set1_epi8(base == DType::Q8_0 ? static_cast<char>(0x80) : 8), ones = _mm512_set1_epi8(1);
  __m512i sum = _mm512_setzero_si512();
  for (std::size_t g = 0; g < 8; ++g) {
    const __m512i s = _mm512_sub_epi8(v[g], offset);
    _mm512_storeu_si512(q + 64 * g, s);
    sum = _mm512_dpbusd_epi32(sum, ones, s);
  }
  _mm512_storeu_ps(reinterpret_cast<float*>(scales), dw);
  _mm512_storeu_si512(corrections, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
}

// Interleaved rows unpacked a slice of k at a time: a whole group in lane
// order (Int8Groups), the blocks past the last group as they are
// (Int8Blocks). The micro-kernel over some of the rows asks for their
// next slice as it computes (next_slice, prefetch_rows.hpp).
struct Int8GroupRows {
  const TensorView* w;

  STREAMLLM_AVX512 std::pair<const std::byte*, std::size_t> block(std::size_t r0, std::size_t rows, std::size_t k0,
                                                                  std::size_t kc, AlignedVector<std::byte>& scratch) const {
    const auto cols = static_cast<std::size_t>(w->cols);
    if (!quant::is_interleaved(w->type) || k0 % kGroupCols != 0 || (kc != kGroupCols && k0 + kc != cols))
      throw Error("Int8GroupRows: " + std::string(dtype_name(w->type)) + " rows sliced at columns [" + std::to_string(k0) + ", " +
                  std::to_string(k0 + kc) + "), not on their groups");
    const DType base = quant::base_type(w->type);
    const bool group = kc == kGroupCols;
    const std::size_t ld = Int8Blocks::row_bytes(kc);
    std::byte* out = grow(scratch, rows * ld);
    for (std::size_t i = 0; i < rows; ++i) {
      std::byte* o = out + i * ld;
      auto* q = reinterpret_cast<std::int8_t*>(o);
      const std::byte* src = w->row(static_cast<std::int64_t>(r0 + i)) + row_bytes(base, static_cast<std::int64_t>(k0));
      if (group)
        unpack_group_lanes(base, src, q, o + Int8Groups::scales_at(kc), o + Int8Groups::corrections_at(kc));
      else
        unpack_blocks32(base, src, kc / 32, q, o + Int8Blocks::scales_at(kc), o + Int8Blocks::corrections_at(kc));
    }
    return {out, ld};
  }
  NextSlice next_slice(std::size_t r, std::size_t block_rows, std::size_t k1, std::size_t) const {
    return kernels::next_slice(*w, r, block_rows, k1, kGroupCols);
  }
};

// The driver's policy for them: slices of one group, each read in the
// layout it was unpacked to.
struct GemmInt8Groups : GemmInt8<Int8Blocks> {
  static_assert(kKc == kGroupCols);

  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const std::byte* w, std::size_t ldw, const std::uint8_t* xp, std::size_t kc, float* c,
                         std::size_t ldc, bool accumulate, TokenMajorOut out, std::index_sequence<MR...> seq) {
    if (kc == kGroupCols)
      gemm_int8_micro_rows<Int8Groups>(rows, w, ldw, xp, kc, c, ldc, accumulate, out, seq);
    else
      gemm_int8_micro_rows<Int8Blocks>(rows, w, ldw, xp, kc, c, ldc, accumulate, out, seq);
  }
};

}  // namespace streamllm::kernels::avx512

STREAMLLM_END_AVX512_INTRINSICS

#endif
