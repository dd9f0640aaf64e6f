#!/usr/bin/env bash
# Installs the Debian 12 packages streamllm builds with (nothing is vendored).
set -euo pipefail
packages=(build-essential cmake pkg-config clang libomp-dev
  libeigen3-dev libxsimd-dev xtl-dev libsentencepiece-dev
  catch2 libbenchmark-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
