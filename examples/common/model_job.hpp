// How an example program gets its model: loaded in this process, or, when
// mpirun started it as more than one process, split across the job's ranks
// (tensor parallel, docs/tensor-parallel.md). Then rank 0 runs the program
// on its shard and the other ranks follow its forward calls; they parse the
// same command line, print nothing, and end when rank 0 is done.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>

#include "common/preset_models.hpp"
#include "common/report_failures.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/loaders/model_file.hpp"
#include "streamllm/model/presets.hpp"

#if defined(STREAMLLM_EXAMPLES_MPI)
#include "streamllm/parallel/tensor_parallel.hpp"
#endif

namespace examples {

// The number of processes of the MPI job that started this one (OpenMPI's
// or a PMI launcher's variable), 1 when no launcher did.
inline int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name); v && *v) return std::max(1, std::atoi(v));
  return 1;
}

// Calls f(model) with the file's model, a Llama of its preset or, in an MPI
// job, of this process's shard (any process count that divides the KV heads
// and that the examples compile a split for, preset_models.hpp); returns what f returns (0 on the ranks
// that follow). Throws streamllm::Error for a shape no preset has, a job
// that cannot split the model, and every load failure (on every rank).
template <class F>
int with_model(int& argc, char**& argv, const std::string& path, const streamllm::ModelFileInfo& info, F&& f) {
  const bool match_max_seq = info.format == streamllm::ModelFormat::Llama2c;
  step("loading the model " + path);
  if (launched_ranks() <= 1)
    return with_example_preset(
        info.shape,
        [&](auto config) {
          auto model = streamllm::load_llama<decltype(config)>(path);
          step("running the model of " + path + " (its KV caches and scratch)");
          return f(model);
        },
        match_max_seq);
#if defined(STREAMLLM_EXAMPLES_MPI)
  static streamllm::parallel::MpiRuntime mpi(argc, argv);  // until exit: MPI_Finalize after every rank is done
  streamllm::parallel::check_ranks(mpi.size(), info.shape.kv_heads);
  return with_sharded_preset(
      info.shape, mpi.size(),
      [&](auto config, auto ranks) {
        streamllm::parallel::TensorParallelModel<decltype(config), decltype(ranks)::value> tp(mpi, path);
        step("running this rank's part of the model of " + path + " (its KV caches and scratch)");
        if (!tp.leads()) {
          tp.follow();
          return 0;
        }
        return f(tp.model());
      },
      match_max_seq);
#else
  (void)argc;
  (void)argv;
  throw streamllm::Error("started as " + std::to_string(launched_ranks()) +
                         " processes, but this program was built without MPI (install libopenmpi-dev and build again)");
#endif
}

}  // namespace examples
