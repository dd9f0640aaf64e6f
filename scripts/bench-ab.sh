#!/usr/bin/env bash
# Two builds of the benchmarks side by side, in turn: bench_types (prefill of
# 512 tokens and decode at depth 0 and 1024, 2 threads), bench_batch and
# bench_streaming, ROUNDS times, A then B in one round and B then A in the
# next (the host's speed drifts within minutes, so neither side keeps the
# slow minutes). Prints each benchmark's median tok/s (or time) per build and
# the median and range of the rounds' ratios B / A.
#
#   scripts/bench-ab.sh BUILD_A BUILD_B      (build folders of the bench preset)
#
#   ROUNDS=4                  rounds (default 3)
#   STREAMLLM_ISA=avx2        both builds as on a CPU without AVX-512 (passed on; STREAMLLM_BENCH_ISA=avx2
#                             does the same for bench_types and bench_batch of builds older than it)
#   BENCH_TYPES="q4_0 f16"    bench_types' weight types (default: six of them)
#   BENCH_PROGRAMS="types"    which of types, batch, streaming (default: all)
#   STREAMLLM_BENCH_NO_MMAP=1 weights read into huge-page memory instead of mapped (passed on;
#                             steadier figures on a guest whose page cache is slow to fault in)
#   PAIR=case                 alternate A and B benchmark by benchmark, not program by program:
#                             each pair of runs a few seconds apart (the model files are read
#                             again each time; slower, but a drifting host weighs on both sides)
#
# Machine limits (../shared/tools/machine-limits) are printed before and after.
# Old and new code: `git worktree add /tmp/old <rev>` and the bench preset in each.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
a="$(cd "$1" && pwd)" b="$(cd "$2" && pwd)"
rounds="${ROUNDS:-3}"
types="${BENCH_TYPES:-f16 bf16 q8_0 q4_0 q4_k_m q2_k}"
programs="${BENCH_PROGRAMS:-types batch streaming}"
data="${STREAMLLM_DATA_DIR:-$root/../shared}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

limits() {
  local tools="$data/tools/machine-limits"
  [ -d "$tools" ] || return 0
  gcc -O3 -march=native -fopenmp "$tools/rd.c" -o "$out/rd" 2>/dev/null || { echo "(rd.c does not build here)"; return 0; }
  echo "read GB/s, 1 thread: $(OMP_NUM_THREADS=1 "$out/rd" 1 6 0 | tail -1)"
  echo "read GB/s, 2 threads: $(OMP_NUM_THREADS=2 OMP_PROC_BIND=spread OMP_PLACES=cores "$out/rd" 1 6 0 | tail -1)"
}

filter_for() {
  case "$1" in
    types) echo "(Prefill/($(echo "$types" | tr ' ' '|'))/threads:2/tokens:512|Decode/($(echo "$types" | tr ' ' '|'))/threads:2/)" ;;
    *) echo "." ;;
  esac
}

echo "== $(date +%T) machine limits"
limits
echo "A: $a"
echo "B: $b"
[ -n "${STREAMLLM_ISA:-}${STREAMLLM_BENCH_ISA:-}" ] && echo "kernels: STREAMLLM_ISA=${STREAMLLM_ISA:-} STREAMLLM_BENCH_ISA=${STREAMLLM_BENCH_ISA:-}"
run() {  # side program round filter tag
  local dir=$a
  [ "$1" = b ] && dir=$b
  "$dir/bench/bench_$2" --benchmark_filter="$4" --benchmark_format=console \
    --benchmark_out="$out/$1-$2-$3$5.json" --benchmark_out_format=json >/dev/null 2>&1
}
for r in $(seq 1 "$rounds"); do
  order="a b"
  [ $((r % 2)) = 0 ] && order="b a"
  for p in $programs; do
    echo "== $(date +%T) round $r: bench_$p"
    if [ "${PAIR:-program}" = case ]; then
      i=0
      while read -r name; do
        i=$((i + 1))
        for side in $order; do run "$side" "$p" "$r" "^${name}\$" "_$i"; done
      done < <("$a/bench/bench_$p" --benchmark_list_tests --benchmark_filter="$(filter_for "$p")" 2>/dev/null)
    else
      for side in $order; do run "$side" "$p" "$r" "$(filter_for "$p")" ""; done
    fi
  done
done
echo "== $(date +%T) machine limits"
limits

python3 - "$out" "$rounds" <<'PY'
import glob, json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(path):  # a run cut short leaves half a file: skip it, say so
    try:
        with open(path) as f:
            return json.load(f)["benchmarks"]
    except (ValueError, KeyError):
        print("skipped (not a whole result):", os.path.basename(path))
        return []
def value(row):  # tok/s where the benchmark reports it, else the time (higher is better: 1/time)
    if "tok/s" in row: return float(row["tok/s"]), "tok/s"
    return 1.0 / float(row["real_time"]), "1/" + row["time_unit"]
res = {}  # (name) -> side -> [per round]
for path in glob.glob(os.path.join(out, "*.json")):
    side, prog, r = os.path.basename(path)[:-5].split("-")
    r = r.split("_")[0]
    for row in rows(path):
        if row.get("error_occurred"): continue
        v, unit = value(row)
        res.setdefault(row["name"], {"unit": unit}).setdefault(side, {})[int(r)] = v
print("\n%-62s %10s %10s %8s %15s" % ("benchmark", "A", "B", "B/A", "rounds' B/A"))
for name in sorted(res):
    d = res[name]
    if "a" not in d or "b" not in d: continue
    common = sorted(set(d["a"]) & set(d["b"]))
    ratios = [d["b"][r] / d["a"][r] for r in common]
    ma, mb = statistics.median(d["a"].values()), statistics.median(d["b"].values())
    fmt = (lambda v: "%.2f" % v) if d["unit"] == "tok/s" else (lambda v: "%.4g" % v)
    print("%-62s %10s %10s %8.3f %7.3f-%-7.3f" % (name[:62], fmt(ma), fmt(mb), statistics.median(ratios), min(ratios), max(ratios)))
PY
