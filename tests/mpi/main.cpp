// The tensor-parallel tests run as one MPI job (mpirun -np P): every rank
// runs every test case, in order; rank 0 checks, the others follow its calls
// (or, in the failure cases, check the error they see themselves).
#define CATCH_CONFIG_RUNNER
#include "mpi_common.hpp"

int main(int argc, char** argv) {
  streamllm::parallel::MpiRuntime mpi(argc, argv);
  test::mpi_runtime() = &mpi;
  const int failed = Catch::Session().run(argc, argv);
  int any = 0;  // the job fails if a test failed on any rank
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, mpi.comm());
  return any;
}
