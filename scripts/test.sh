#!/usr/bin/env bash
# Builds and runs the whole test suite (CTest; long-stream tests included).
#   STREAMLLM_SANITIZE=1  build with clang, AddressSanitizer and UBSan
#   STREAMLLM_NATIVE=0    portable build (no -march=native; the kernel families still chosen at run time)
#   CTEST_ARGS="-L quick" run only the quick label
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/install-deps.sh"

sanitize="${STREAMLLM_SANITIZE:-0}"
native="${STREAMLLM_NATIVE:-1}"
# The builds are CMakePresets.json's: test, asan, portable.
preset="test"
name="build-test"
args=()
if [ "$sanitize" = 1 ]; then
  # -O1 with line tables only (the preset): readable sanitizer reports, and a
  # build that keeps CI well inside its time on two cores.
  preset="asan"
  name="build-asan"
fi
if [ "$native" = 0 ]; then
  # The portable build checks the library built as a distribution builds it: its tests, not the
  # example programs (the server, chat and their tests run in the other two)
  # nor the MPI layer (no kernels of its own).
  if [ "$sanitize" = 1 ]; then
    args+=(-DSTREAMLLM_NATIVE=OFF -DSTREAMLLM_BUILD_EXAMPLES=OFF -DSTREAMLLM_WITH_MPI=OFF)
  else
    preset="portable"
  fi
  name="$name-portable"
fi
# The tests read real models and goldens: find them before configuring, as a
# build folder configured without them keeps an empty data path in its cache.
data="${STREAMLLM_DATA_DIR:-$root/../shared}"
if [ ! -d "$data/models" ] || [ ! -d "$data/golden" ]; then
  echo "test.sh: no test data at '$data' (models/ and golden/): put the shared folder beside the" \
       "repository or set STREAMLLM_DATA_DIR" >&2
  exit 1
fi
args+=(-DSTREAMLLM_DATA_DIR="$(cd "$data" && pwd)")
build="${STREAMLLM_BUILD_DIR:-$root/$name}"

# A folder an older version configured for Makefiles is configured again:
# the presets build with Ninja, and CMake refuses to switch in place.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt"; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S "$root" --preset "$preset" -B "$build" "${args[@]}" >/dev/null
# The README's build makes everything; the sanitizer and portable builds
# make only what their tests run (tests/CMakeLists.txt: streamllm_check).
targets=()
if [ "$sanitize" = 1 ] || [ "$native" = 0 ]; then
  targets=(--target streamllm_check)
fi
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
cd "$build"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
# shellcheck disable=SC2086
ctest --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
