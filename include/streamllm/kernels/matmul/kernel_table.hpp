// The kernel table: for a weight type on an ISA, the row (kernel.hpp) that
// says how a product with it runs. The rows are each ISA's (portable/,
// avx2/, avx512/ rows.hpp); a type an ISA does not accelerate takes the
// row of the next ISA down that does (AVX-512, AVX2, portable), and a type
// with no portable row of its own takes the portable dequantising one. matmul.hpp looks a row up once per matrix call.
#pragma once

#include <span>

#include "streamllm/kernels/matmul/avx2/rows.hpp"
#include "streamllm/kernels/matmul/avx512/rows.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/matmul/portable/rows.hpp"

namespace streamllm::kernels {

// Every ISA's rows, fastest ISA first.
inline std::span<const MatmulKernel> kernel_rows(Isa isa) {
  switch (isa) {
    case Isa::Avx512Bf16Vnni: return avx512::kRows;
    case Isa::Avx2: return avx2::kRows;
    case Isa::Portable: break;
  }
  return portable::kRows;
}

// The first row of `isa` for t that applies, or null.
inline const MatmulKernel* find_kernel(DType t, Isa isa) {
  for (const MatmulKernel& row : kernel_rows(isa))
    if (row.type == t && (row.applies == nullptr || row.applies())) return &row;
  return nullptr;
}

inline const MatmulKernel& matmul_kernel(DType t, Isa isa) {
  if (const MatmulKernel* row = find_kernel(t, isa)) return *row;
  // An AVX-512 CPU runs the AVX2 kernels: a type without an AVX-512 row takes its AVX2 one.
  if (isa == Isa::Avx512Bf16Vnni)
    if (const MatmulKernel* row = find_kernel(t, Isa::Avx2)) return *row;
  if (const MatmulKernel* row = find_kernel(t, Isa::Portable)) return *row;
  return portable::kAnyTypeRow;
}

}  // namespace streamllm::kernels
