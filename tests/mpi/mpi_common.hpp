// The MPI test program's shared pieces: the job's MPI runtime, and running a
// test body with the job's size as a compile-time rank count.
#pragma once

#include <type_traits>

#include "../common.hpp"
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

}  // namespace test
