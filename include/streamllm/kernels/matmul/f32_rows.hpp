// Matrix-vector products with f32 weights: y[j][r] = dot(W[r], x[j]) for a
// few tokens j. Decode reads every weight once per token, so this loop runs
// at memory bandwidth; its only job is to keep enough loads in flight. The
// body is f32_rows-inl.hpp, compiled per kernel family (portable::, avx2::,
// avx512::gemv_f32_rows, and gemv_f32, an F32 row's decode kernel), each
// family's rows naming their own.
#pragma once

#include <cstddef>

#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/kernel.hpp"
#include "streamllm/kernels/simd/vec.hpp"

#define STREAMLLM_PER_ISA_BODY "streamllm/kernels/matmul/f32_rows-inl.hpp"
#include "streamllm/kernels/simd/for_each_isa.hpp"
