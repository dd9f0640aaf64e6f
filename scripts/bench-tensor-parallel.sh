#!/usr/bin/env bash
# Tensor parallel against one process, in one run on this machine (issue 26):
# the machine's limits, MPI_Allreduce over shared memory and TCP loopback,
# then bench_tensor_parallel as one process with every core, as 2 ranks of
# one thread over shared memory, and as 2 ranks over TCP loopback.
#   STREAMLLM_BENCH_TYPES="q8_0 q4_0 bf16" (the default) picks the weight types;
#   STREAMLLM_BENCH_ROUNDS=3 (the default) runs the three ways in turn that many
#   times, and the summary at the end gives each way's median and the median
#   of each round's ratio to one process. The host's speed drifts by 10-20%
#   within minutes; runs of one way back to back (--benchmark_repetitions)
#   would put a slow minute on one side of the ratio only.
#   Other arguments go to bench_tensor_parallel.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STREAMLLM_BUILD_DIR:-$root/build-bench}"
data="${STREAMLLM_DATA_DIR:-$root/../shared}"
cmake -S "$root" --preset bench -B "$build" -DSTREAMLLM_DATA_DIR="$data" >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_tensor_parallel bench_allreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 STREAMLLM_DATA_DIR="$data"
tcp=(--mca btl "tcp,self" --mca btl_tcp_if_include lo)
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
# Every run's figures go to $limits/runs as: type bench way round tok/s
# rank-MiB all-reduce-us/token all-reduce-share.
runs="$limits/runs"
: >"$runs"
record() {  # record TYPE BENCH WAY ROUND COMMAND...: runs it, keeps its figures
  local type="$1" bench="$2" way="$3" round="$4"
  shift 4
  "$@" --benchmark_filter="/$bench/" --benchmark_out="$limits/out.csv" --benchmark_out_format=csv
  # The CSV's header names the counters; a run with repetitions gives its median.
  awk -F, -v key="$type $bench $way $round" '
    /^name,/ { for (i = 1; i <= NF; ++i) { gsub(/"/, "", $i); col[$i] = i }; next }
    col["name"] && (row == "" || $1 ~ /_median"$/) { row = $0 }
    END {
      split(row, f, ",")
      printf "%s %s %s %s %s\n", key, f[col["tok/s"]], f[col["rank_rss_MiB"]],
        (col["allreduce_us/tok"] ? f[col["allreduce_us/tok"]] : "-"), (col["allreduce_share"] ? f[col["allreduce_share"]] : "-")
    }' "$limits/out.csv" >>"$runs"
}
rounds="${STREAMLLM_BENCH_ROUNDS:-3}"
for type in ${STREAMLLM_BENCH_TYPES:-q8_0 q4_0 bf16}; do
  export STREAMLLM_BENCH_TYPE="$type"
  for bench in pp512 tg128 batch8; do
    for round in $(seq "$rounds"); do
      echo "== $type $bench, round $round: one process, $(nproc) threads"
      OMP_NUM_THREADS="$(nproc)" record "$type" "$bench" one "$round" "$bin/bench_tensor_parallel" "$@"
      echo "== $type $bench, round $round: 2 ranks of 1 thread, shared memory"
      OMP_NUM_THREADS=1 record "$type" "$bench" shm "$round" mpirun -np 2 --bind-to core "$bin/bench_tensor_parallel" "$@"
      echo "== $type $bench, round $round: 2 ranks of 1 thread, TCP loopback"
      OMP_NUM_THREADS=1 record "$type" "$bench" tcp "$round" mpirun -np 2 --bind-to core "${tcp[@]}" "$bin/bench_tensor_parallel" "$@"
    done
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

# The summary: per type and benchmark, each way's median tok/s, the median
# (and range) of the rounds' ratios to one process, the all-reduce's median
# time per token and share of the step, and a rank's memory against one process.
echo "== summary over $rounds rounds: median tok/s; ratio to one process: median (lowest-highest round)"
awk -v rounds="$rounds" '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; --j) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function range(list,   a, n, i, lo, hi) {
    n = split(list, a, " "); lo = hi = a[1]
    for (i = 2; i <= n; ++i) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
    return sprintf("%.2f-%.2f", lo, hi)
  }
  {
    k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
    tok[k, $3, $4] = $5; toks[k, $3] = toks[k, $3] " " $5; mem[k, $3] = mem[k, $3] " " $6
    if ($7 != "-") { us[k, $3] = us[k, $3] " " $7; share[k, $3] = share[k, $3] " " $8 }
  }
  END {
    printf "%-14s %9s %9s %9s  %-18s %-18s %-22s %-22s %s\n", "type bench", "one", "shm", "tcp", "shm/one", "tcp/one",
      "all-reduce shm", "all-reduce tcp", "rank MiB / one"
    for (i = 1; i <= nk; ++i) {
      k = order[i]
      for (w = 1; w <= 2; ++w) {
        way = w == 1 ? "shm" : "tcp"; r[way] = ""
        for (j = 1; j <= rounds; ++j)
          if ((k, "one", j) in tok && (k, way, j) in tok) r[way] = r[way] " " tok[k, way, j] / tok[k, "one", j]
        ar[way] = sprintf("%.0f us/tok, %.1f%%", median(us[k, way]), 100 * median(share[k, way]))
      }
      printf "%-14s %9.1f %9.1f %9.1f  %.2f (%s)   %.2f (%s)   %-22s %-22s %.0f / %.0f = %.3f\n", k,
        median(toks[k, "one"]), median(toks[k, "shm"]), median(toks[k, "tcp"]),
        median(r["shm"]), range(r["shm"]), median(r["tcp"]), range(r["tcp"]), ar["shm"], ar["tcp"],
        median(mem[k, "shm"]), median(mem[k, "one"]), median(mem[k, "shm"]) / median(mem[k, "one"])
    }
  }' "$runs"
