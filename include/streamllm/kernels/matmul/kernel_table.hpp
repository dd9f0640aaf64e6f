// The kernel table: for a weight type on an ISA, the row (kernel.hpp) that
// says how a product with it runs. The rows are each ISA's (portable/,
// avx2/, avx512/ rows.hpp); a type an ISA does not accelerate takes the
// row of the next ISA down that does (AVX-512, AVX2, portable), and a type
// with no portable row of its own takes the portable dequantising one.
// matmul.hpp looks a row up once per matrix call.
//
// Compiling the kernels once. The table points at every kernel of every
// ISA, so each translation unit that runs a product compiles them all: most
// of its compile time (in a test unit under clang, 45 of the 62 s spent
// optimising functions). A program of several units can compile them in
// one: define STREAMLLM_KERNELS_IN_ONE_UNIT in every unit (a compile
// definition of the whole target, like Eigen's configuration macros), and
// also STREAMLLM_KERNELS_UNIT in exactly one, before its first include of
// the library. The other units then only declare kernel_rows and
// matmul_kernel, which that unit defines (a program that forgets it fails
// to link). Without either macro each unit compiles its own, inline.
#pragma once

#include "streamllm/kernels/matmul/kernel.hpp"

#if defined(STREAMLLM_KERNELS_IN_ONE_UNIT) && !defined(STREAMLLM_KERNELS_UNIT)

#include <span>

namespace streamllm::kernels {
// Defined in the program's STREAMLLM_KERNELS_UNIT.
std::span<const MatmulKernel> kernel_rows(Isa isa);
const MatmulKernel& matmul_kernel(DType t, Isa isa);
}  // namespace streamllm::kernels

#else

#include <span>

#include "streamllm/kernels/matmul/avx2/rows.hpp"
#include "streamllm/kernels/matmul/avx512/rows.hpp"
#include "streamllm/kernels/matmul/portable/rows.hpp"

#if defined(STREAMLLM_KERNELS_IN_ONE_UNIT)
#define STREAMLLM_KERNEL_TABLE_LINKAGE  // the one definition of the program
#else
#define STREAMLLM_KERNEL_TABLE_LINKAGE inline
#endif

namespace streamllm::kernels {

// Every ISA's rows, fastest ISA first.
STREAMLLM_KERNEL_TABLE_LINKAGE std::span<const MatmulKernel> kernel_rows(Isa isa) {
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

STREAMLLM_KERNEL_TABLE_LINKAGE const MatmulKernel& matmul_kernel(DType t, Isa isa) {
  if (const MatmulKernel* row = find_kernel(t, isa)) return *row;
  // An AVX-512 CPU runs the AVX2 kernels: a type without an AVX-512 row takes its AVX2 one.
  if (isa == Isa::Avx512Bf16Vnni)
    if (const MatmulKernel* row = find_kernel(t, Isa::Avx2)) return *row;
  if (const MatmulKernel* row = find_kernel(t, Isa::Portable)) return *row;
  return portable::kAnyTypeRow;
}

}  // namespace streamllm::kernels

#undef STREAMLLM_KERNEL_TABLE_LINKAGE
#endif
