#!/usr/bin/env bash
# Fresh machine to a streamed story: installs dependencies, builds the
# generate example and runs it on the default model (stories260K).
# Extra arguments go to generate, e.g. --prompt "Tom had a dog" -n 100.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/install-deps.sh"

data="${STREAMLLM_DATA_DIR:-$root/../shared}"
if [ ! -f "$data/models/stories260K.bin" ] || [ ! -f "$data/models/tok512.model" ]; then
  cat >&2 <<MSG
The default model is not here: $data/models/stories260K.bin and tok512.model.
Download them from Hugging Face, karpathy/tinyllamas:
  https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin
  https://huggingface.co/karpathy/tinyllamas/resolve/main/stories260K/tok512.model
and put them in $data/models/ (or point STREAMLLM_DATA_DIR at the folder holding models/).
MSG
  exit 1
fi

build="${STREAMLLM_BUILD_DIR:-$root/build}"
# A folder an older version configured for Makefiles is configured again:
# the presets build with Ninja, and CMake refuses to switch in place.
if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$build/CMakeCache.txt"; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S "$root" --preset release -B "$build" -DSTREAMLLM_DATA_DIR="$data" >/dev/null
cmake --build "$build" --target generate -j"$(nproc)"
STREAMLLM_DATA_DIR="$data" "$build/examples/generate" "$@"
