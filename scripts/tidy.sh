#!/usr/bin/env bash
# clang-tidy (.clang-tidy's checks) over the library's headers: one unit
# that includes every header and instantiates the model, the scheduler and
# the chat session of a small shape, so that template code is checked too.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
unit="$(mktemp --suffix=.cpp)"
trap 'rm -f "$unit"' EXIT
{
  for h in $(cd "$root/include" && find streamllm -name '*.hpp' ! -name '*-inl.hpp' ! -name for_each_isa.hpp | sort); do echo "#include \"$h\""; done
  cat <<'CPP'
template class streamllm::Llama<streamllm::presets::Stories260K>;
template class streamllm::BatchScheduler<streamllm::presets::Stories260K>;
template class streamllm::ChatSession<streamllm::presets::Stories260K>;
template class streamllm::serve::BatchEngine<streamllm::presets::Stories260K>;
template class streamllm::Llama<streamllm::TensorShard<streamllm::presets::Stories260K, 2>>;
template class streamllm::parallel::MpiShardLink<streamllm::TensorShard<streamllm::presets::Stories260K, 2>>;
template class streamllm::parallel::TensorParallelModel<streamllm::presets::Stories260K, 2>;
CPP
} > "$unit"
# MPI's headers (parallel/), as system headers: from the compiler wrapper.
mpi=()
for flag in $(mpicxx --showme:compile); do
  case "$flag" in -I*) mpi+=(-isystem "${flag#-I}") ;; *) mpi+=("$flag") ;; esac
done
clang-tidy --quiet "$unit" -- -std=c++20 -fopenmp -march=x86-64-v3 -I"$root/include" -isystem /usr/include/eigen3 "${mpi[@]}" "$@"
