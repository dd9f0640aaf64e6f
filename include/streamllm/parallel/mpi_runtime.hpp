// MPI for the life of a program (MPI_Init_thread .. MPI_Finalize), and the
// few collectives the tensor-parallel layer needs beyond the link's: one
// failure told to every rank, and messages of 64-bit words from rank 0.
// Only this folder includes <mpi.h>; the rest of the library never does.
#pragma once

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "streamllm/core/error.hpp"

namespace streamllm::parallel {

// An MPI call that failed, with MPI's own words for why.
inline void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

class MpiRuntime {
 public:
  // Serialized threading: a server's threads may end caches (a message to
  // the other ranks) while its scheduler runs a forward; the link takes
  // turns between them.
  MpiRuntime(int& argc, char**& argv) {
    int provided = 0;
    check_mpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw Error("MPI: this MPI library gives no MPI_THREAD_SERIALIZED support, which the tensor-parallel layer needs");
    }
    // Errors come back as codes (check_mpi turns them into exceptions) rather than aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiRuntime() { MPI_Finalize(); }
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }

 private:
  int rank_ = 0, size_ = 1;
};

// Runs `f` on every rank; if it throws on any, every rank throws the same
// Error: the message of the lowest rank that failed, naming that rank. No
// rank is left waiting for one that gave up.
inline void on_every_rank(MPI_Comm comm, const std::function<void()>& f) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string message;
  try {
    f();
  } catch (const std::exception& e) {
    message = e.what();
    if (message.empty()) message = "an error without a message";
  }
  const int mine = message.empty() ? size : rank;
  int first = size;
  check_mpi(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (errors)");
  if (first == size) return;
  auto length = static_cast<std::int64_t>(message.size());
  check_mpi(MPI_Bcast(&length, 1, MPI_INT64_T, first, comm), "MPI_Bcast (error)");
  message.resize(static_cast<std::size_t>(length));
  check_mpi(MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, first, comm), "MPI_Bcast (error)");
  throw Error("rank " + std::to_string(first) + " of " + std::to_string(size) + ": " + message);
}

// A message of 64-bit words from rank 0 to every other rank.
inline void broadcast_words(MPI_Comm comm, std::vector<std::int64_t>& words) {
  auto n = static_cast<std::int64_t>(words.size());
  check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm), "MPI_Bcast (message length)");
  words.resize(static_cast<std::size_t>(n));
  check_mpi(MPI_Bcast(words.data(), static_cast<int>(n), MPI_INT64_T, 0, comm), "MPI_Bcast (message)");
}

}  // namespace streamllm::parallel
