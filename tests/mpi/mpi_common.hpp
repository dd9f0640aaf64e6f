// The MPI test program's shared pieces: the job's MPI runtime, and running a
// test body with the job's size as a compile-time rank count.
#pragma once

#include <type_traits>

#include "../common.hpp"
#include "streamllm/loaders/convert.hpp"
#include "streamllm/parallel/tensor_parallel.hpp"

namespace test {

inline streamllm::parallel::MpiRuntime*& mpi_runtime() {
  static streamllm::parallel::MpiRuntime* runtime = nullptr;
  return runtime;
}
inline streamllm::parallel::MpiRuntime& mpi() { return *mpi_runtime(); }

// f(std::integral_constant<int, P>) for a job of P = 2 or 4 processes.
template <class F>
void with_job_ranks(F&& f) {
  switch (mpi().size()) {
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: FAIL("the tensor-parallel tests run under mpirun -np 2 or -np 4, not " << mpi().size());
  }
}

// Both the split model's logits and the one-process model's: they differ
// only in the order of the sums.
inline constexpr float kSplitTolerance = 1e-4f;

// The same for weights whose kernels quantise the activations to int8 (per
// block of 32, to the nearest 1/127 of its largest): a sum in another order
// (the all-reduce) can move a value by one ulp across a rounding boundary,
// and that activation then differs by a whole step. Over a few hundred
// thousand roundings a run meets a few (measured on the Zen 5: Q8_0 and
// Q4_0 split over two ranks, one jump each of 0.24% and 0.45% of the
// largest logit; none on the AVX2 host, whose Q8_0 prefill is in f32). A
// wrong slice or a lost partial sum moves logits by their own size.
inline constexpr float kSplitInt8Tolerance = 0.015f;  // of the largest |logit|

}  // namespace test
