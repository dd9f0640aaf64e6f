#!/usr/bin/env bash
# Tensor parallel against one process, in one run on this machine (issue 26):
# the machine's limits, MPI_Allreduce over shared memory and TCP loopback,
# then bench_tensor_parallel as one process with every core, as 2 ranks of
# one thread over shared memory, and as 2 ranks over TCP loopback.
#   STREAMLLM_BENCH_TYPES="q8_0 q4_0 bf16" (the default) picks the weight types;
#   arguments go to bench_tensor_parallel (--benchmark_repetitions=3 for
#   medians on a noisy machine).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STREAMLLM_BUILD_DIR:-$root/build-bench}"
data="${STREAMLLM_DATA_DIR:-$root/../shared}"
cmake -S "$root" --preset bench -B "$build" -DSTREAMLLM_DATA_DIR="$data" >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_tensor_parallel bench_allreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STREAMLLM_DATA_DIR="$data"
tcp=(--mca btl tcp,self --mca btl_tcp_if_include lo)
bin="$build/bench"

limits="$(mktemp -d)"
trap 'rm -rf "$limits"' EXIT
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
# ../shared/tools/machine-limits is written for AVX-512: on a CPU without it,
# say so and go on (measure the limits another way and report them beside).
if gcc -O3 -march=native -fopenmp "$data/tools/machine-limits/rd.c" -o "$limits/rd" 2>/dev/null; then
  echo "== read bandwidth, 1 and 2 threads (GB/s per pass)"
  OMP_NUM_THREADS=1 "$limits/rd" 1 4 0
  OMP_NUM_THREADS=2 OMP_PROC_BIND=spread OMP_PLACES=cores "$limits/rd" 1 4 0
else
  echo "== machine-limits/rd.c does not build on this CPU (it needs AVX-512)"
fi
if clang -O3 -march=native -fopenmp "$data/tools/machine-limits/peak.c" -o "$limits/peak" 2>/dev/null; then
  echo "== compute peaks, 2 threads"
  OMP_NUM_THREADS=2 "$limits/peak"
else
  echo "== machine-limits/peak.c does not build on this CPU (it needs AVX-512)"
fi

echo "== MPI_Allreduce, 2 ranks, shared memory"
mpirun -np 2 "$bin/bench_allreduce"
echo "== MPI_Allreduce, 2 ranks, TCP loopback"
mpirun -np 2 "${tcp[@]}" "$bin/bench_allreduce"

# Each benchmark in processes of its own: a rank's resident memory is then
# that workload's, not what the benchmarks before it left mapped (a prefill's
# scattered embedding rows map whole 64 KiB windows of the file around them).
for type in ${STREAMLLM_BENCH_TYPES:-q8_0 q4_0 bf16}; do
  export STREAMLLM_BENCH_TYPE="$type"
  for bench in pp512 tg128 batch8; do
    echo "== $type $bench: one process, $(nproc) threads"
    OMP_NUM_THREADS="$(nproc)" "$bin/bench_tensor_parallel" --benchmark_filter="/$bench/" "$@"
    echo "== $type $bench: 2 ranks of 1 thread, shared memory"
    OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "$bin/bench_tensor_parallel" --benchmark_filter="/$bench/" "$@"
    echo "== $type $bench: 2 ranks of 1 thread, TCP loopback"
    OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "${tcp[@]}" "$bin/bench_tensor_parallel" --benchmark_filter="/$bench/" "$@"
  done
done
# The choices: the classifier on rank 0 alone, and the all-reduce in bf16.
export STREAMLLM_BENCH_TYPE=q8_0
echo "== q8_0: 2 ranks, shared memory, the classifier on rank 0"
STREAMLLM_BENCH_CLASSIFIER=rank0 OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "$bin/bench_tensor_parallel" "$@"
echo "== q8_0: 2 ranks, shared memory, bf16 all-reduce"
STREAMLLM_BENCH_ALLREDUCE=bf16 OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "$bin/bench_tensor_parallel" "$@"
echo "== q8_0: 2 ranks, TCP loopback, bf16 all-reduce"
STREAMLLM_BENCH_ALLREDUCE=bf16 OMP_NUM_THREADS=1 mpirun -np 2 --bind-to core "${tcp[@]}" "$bin/bench_tensor_parallel" "$@"
