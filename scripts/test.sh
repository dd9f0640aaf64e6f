#!/usr/bin/env bash
# Builds and runs the whole test suite (CTest; long-stream tests included).
#   STREAMLLM_SANITIZE=1  build with clang, AddressSanitizer and UBSan
#   STREAMLLM_NATIVE=0    portable build (no -march=native: the SSE2 kernels)
#   CTEST_ARGS="-L quick" run only the quick label
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/install-deps.sh"

sanitize="${STREAMLLM_SANITIZE:-0}"
native="${STREAMLLM_NATIVE:-1}"
name="build-test"
args=(-DCMAKE_BUILD_TYPE=Release -DSTREAMLLM_BUILD_BENCHMARKS=OFF)
if [ "$sanitize" = 1 ]; then
  name="build-asan"
  # -O1 with line tables only: readable sanitizer reports, and a build that
  # keeps CI well inside its time on two cores.
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTREAMLLM_SANITIZE=ON -DSTREAMLLM_BUILD_FUZZERS=ON -DSTREAMLLM_BUILD_BENCHMARKS=OFF
        -DCMAKE_CXX_COMPILER=clang++ "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG")
fi
if [ "$native" = 0 ]; then
  # The portable build checks the SSE2 kernels: the library's tests, not the
  # example programs (the server, chat and their tests run in the other two).
  name="$name-portable"
  args+=(-DSTREAMLLM_NATIVE=OFF -DSTREAMLLM_BUILD_EXAMPLES=OFF)
fi
[ -n "${STREAMLLM_DATA_DIR:-}" ] && args+=(-DSTREAMLLM_DATA_DIR="$STREAMLLM_DATA_DIR")
build="${STREAMLLM_BUILD_DIR:-$root/$name}"

cmake -S "$root" -B "$build" "${args[@]}" >/dev/null
# The README's build makes everything; the sanitizer and portable builds
# make only what their tests run (the tests bring the server and chat
# binaries they start; convert is left out).
targets=()
if [ "$sanitize" = 1 ]; then
  targets=(--target streamllm_tests generate perplexity write_test_model fuzz_gguf fuzz_make_seeds)
elif [ "$native" = 0 ]; then
  targets=(--target streamllm_tests write_test_model)
fi
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
cd "$build"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
# shellcheck disable=SC2086
ctest --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
