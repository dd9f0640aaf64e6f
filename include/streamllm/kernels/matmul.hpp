// y = x W^T for a weight matrix of any supported type: the one dispatch per
// matrix call. Few tokens take the matrix-vector path (memory-bound); many
// take the tiled matrix-matrix path (compute-bound).
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <string>

#include "streamllm/error.hpp"
#include "streamllm/kernels/gemm.hpp"
#include "streamllm/kernels/gemv_f32.hpp"
#include "streamllm/kernels/threading.hpp"
#include "streamllm/tensor.hpp"

namespace streamllm::kernels {

// Up to this many tokens, reading each weight row once for all of them in
// the matrix-vector kernel beats packing them for the tiled kernel.
inline constexpr std::size_t kMaxGemvTokens = 4;

inline void gemv_f32(const float* w, std::size_t m, std::size_t k, const float* x, std::size_t ldx,
                     std::size_t n, float* y, std::size_t ldy) {
  parallel_ranges(m, 4, m * k * n, [&](std::size_t r0, std::size_t r1) {
    switch (n) {
      case 1: gemv_f32_rows<1>(w, k, k, x, ldx, y, ldy, r0, r1); break;
      case 2: gemv_f32_rows<2>(w, k, k, x, ldx, y, ldy, r0, r1); break;
      case 3: gemv_f32_rows<3>(w, k, k, x, ldx, y, ldy, r0, r1); break;
      default: gemv_f32_rows<4>(w, k, k, x, ldx, y, ldy, r0, r1); break;
    }
  });
}

inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x,
                       std::size_t ldx, std::size_t n, float* y, std::size_t ldy) {
  if (n <= kMaxGemvTokens) {
    gemv_f32(w, m, k, x, ldx, n, y, ldy);
  } else {
    gemm(F32RowSource{w, k}, m, k, x, ldx, n, y, ldy);
  }
}

// y[n][ldy] = x[n][ldx] * W^T, for the first W.rows outputs of each row of y.
inline void matmul(const TensorView& w, const float* x, std::size_t n, std::size_t ldx, float* y,
                   std::size_t ldy) {
  const auto m = static_cast<std::size_t>(w.rows);
  const auto k = static_cast<std::size_t>(w.cols);
  if (n == 0) return;
  switch (w.type) {
    case DType::F32:
      return matmul_f32(reinterpret_cast<const float*>(w.data), m, k, x, ldx, n, y, ldy);
    default:
      throw Error("matmul: weight type " + std::string(dtype_name(w.type)) +
                  " has no kernel in this build");
  }
}

namespace scalar {
// The oracle: Eigen's product over the same memory, in double.
inline void matmul_f32(const float* w, std::size_t m, std::size_t k, const float* x,
                       std::size_t ldx, std::size_t n, float* y, std::size_t ldy) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> W(w, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(k));
  const Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>> X(
      x, static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(k),
      Eigen::OuterStride<>(static_cast<Eigen::Index>(ldx)));
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> Y(y, static_cast<Eigen::Index>(n),
                                                   static_cast<Eigen::Index>(m),
                                                   Eigen::OuterStride<>(static_cast<Eigen::Index>(ldy)));
  Y = (X.cast<double>() * W.cast<double>().transpose()).cast<float>();
}
}  // namespace scalar

}  // namespace streamllm::kernels
