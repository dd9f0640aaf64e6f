// The f32 tiles (the policy of gemm.hpp's driver) over Vec, compiled once per
// kernel family (kernels/simd/for_each_isa.hpp).
#ifndef STREAMLLM_ISA
#error "a body of code per kernel family: included by kernels/simd/for_each_isa.hpp"
#endif

namespace streamllm::kernels::STREAMLLM_ISA {

// f32 tiles. Accumulators kRows x 2 vectors plus 3 working registers: 27 of
// AVX-512's 32, 15 of the 16 that SSE and AVX2 have.
struct GemmF32 {
  using Packed = float;                            // packed tokens
  using Weight = float;                            // weight blocks
  static constexpr std::size_t kTok = 2 * kLanes;  // tokens per micro-tile
  static constexpr std::size_t kRows = kLanes >= 16 ? 12 : 6;
  // Slices of 2048 columns: TinyLlama's rows of 2048 whole, so a block of
  // rows is one run of memory, which the prefetchers follow as one stream,
  // not one stream per row: short prefills are faster, long ones level.
  // The weight block (kMc x kKc floats: 384 KB with 8 lanes) stays in L2.
  static constexpr std::size_t kKc = 2048;
  static constexpr std::size_t kMc = 8 * kRows;

  // Packed elements per group of tokens, and where column k0 starts in it.
  static std::size_t packed_size(std::size_t k) { return k * kTok; }
  static std::size_t packed_offset(std::size_t k0) { return k0 * kTok; }

  // Group g of x [n][ldx] -> xp [group][k][kTok], zero padded to whole groups.
  static void pack_group(const float* x, std::size_t ldx, std::size_t n, std::size_t k, float* xp, std::size_t g) {
    pack_group_by(transpose<float>, x, ldx, n, k, xp, g);
  }
  template <class Transpose>
  static void pack_group_by(Transpose&& transpose_rows, const float* x, std::size_t ldx, std::size_t n, std::size_t k, float* xp,
                            std::size_t g) {
    float* dst = xp + g * k * kTok;
    const std::size_t valid = std::min(kTok, n - g * kTok);
    transpose_rows(x + g * kTok * ldx, ldx, valid, k, dst, kTok);
    for (std::size_t kk = 0; kk < k; ++kk)
      for (std::size_t t = valid; t < kTok; ++t) dst[kk * kTok + t] = 0.f;
  }

  // c[i][0..kTok) (+)= sum_kk w[i][kk] * xp[kk][0..kTok) for MR rows; with
  // Half, the first half of the tokens only (the rest are padding).
  template <std::size_t MR, bool Half>
  static void micro(const float* w, std::size_t ldw, const float* xp, std::size_t kc, float* c, std::size_t ldc,
                    bool accumulate) {
    Vec acc0[MR], acc1[MR];
#pragma GCC unroll 16
    for (std::size_t i = 0; i < MR; ++i) {
      acc0[i] = accumulate ? load(c + i * ldc) : Vec(0.f);
      if constexpr (!Half) acc1[i] = accumulate ? load(c + i * ldc + kLanes) : Vec(0.f);
    }
    for (std::size_t kk = 0; kk < kc; ++kk) {
      const Vec x0 = Vec::load_aligned(xp + kk * kTok);
      Vec x1 = x0;
      if constexpr (!Half) x1 = Vec::load_aligned(xp + kk * kTok + kLanes);
#pragma GCC unroll 16
      for (std::size_t i = 0; i < MR; ++i) {
        const Vec wb(w[i * ldw + kk]);
        acc0[i] = fma(wb, x0, acc0[i]);
        if constexpr (!Half) acc1[i] = fma(wb, x1, acc1[i]);
      }
    }
#pragma GCC unroll 16
    for (std::size_t i = 0; i < MR; ++i) {
      store(c + i * ldc, acc0[i]);
      if constexpr (!Half) store(c + i * ldc + kLanes, acc1[i]);
    }
  }

  template <std::size_t... MR>
  static void micro_rows(std::size_t rows, const float* w, std::size_t ldw, const float* xp, std::size_t kc, float* c,
                         std::size_t ldc, bool accumulate, bool half, std::index_sequence<MR...>) {
    if (half)
      ((rows == MR + 1 ? micro<MR + 1, true>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
    else
      ((rows == MR + 1 ? micro<MR + 1, false>(w, ldw, xp, kc, c, ldc, accumulate) : void()), ...);
  }

  // yt [rows][ld] (tokens along rows) -> y [n][ldy].
  static void unpack(const float* yt, std::size_t ld, std::size_t rows, std::size_t n, float* y, std::size_t ldy) {
    transpose(yt, ld, rows, n, y, ldy);
  }
};

}  // namespace streamllm::kernels::STREAMLLM_ISA
