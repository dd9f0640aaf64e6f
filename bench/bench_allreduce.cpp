// MPI_Allreduce (sum of floats) over the job's ranks, from one float to 16
// MiB: the latency and bandwidth a tensor-parallel layer pays twice per
// layer (docs/tensor-parallel.md's cost model takes them from here).
//
//   mpirun -np 2 bench_allreduce                                                   shared memory
//   mpirun -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo bench_allreduce    TCP loopback
//
// Each size runs for about 0.2 s (rank 0 picks the count from a first try
// and tells the others); the time is the slowest rank's mean per call.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "streamllm/parallel/mpi_runtime.hpp"

namespace {

// Seconds per call of n iterations, the slowest rank's.
double time_calls(MPI_Comm comm, std::vector<float>& buf, int iterations) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iterations; ++i)
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, comm);
  double mine = (MPI_Wtime() - t0) / iterations, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  streamllm::parallel::MpiRuntime mpi(argc, argv);
  if (mpi.rank() == 0)
    std::printf("MPI_Allreduce, float sum, %d ranks\n%12s %12s %14s %12s\n", mpi.size(), "floats", "bytes", "us/call", "GB/s");
  for (std::size_t n = 1; n <= (std::size_t(1) << 22); n *= 4) {
    std::vector<float> buf(n, 1.0f);
    time_calls(mpi.comm(), buf, 5);  // warm up
    int iterations = static_cast<int>(std::clamp(0.2 / time_calls(mpi.comm(), buf, 3), 3.0, 20000.0));
    MPI_Bcast(&iterations, 1, MPI_INT, 0, mpi.comm());
    const double s = time_calls(mpi.comm(), buf, iterations);
    if (mpi.rank() == 0) std::printf("%12zu %12zu %14.2f %12.3f\n", n, n * 4, 1e6 * s, static_cast<double>(n * 4) / s / 1e9);
  }
  return 0;
}
