// The forward passes the fuzzers reach, compiled once (fuzz_models.cpp, with
// libFuzzer's coverage) for both targets: the model instantiations are most
// of a fuzzer's build time, and the two load the same shapes.
#pragma once

#include <memory>
#include <string>

#include "streamllm/formats/gguf.hpp"

namespace streamllm::fuzz {

// The weights of a GGUF file of FuzzShape or FuzzShapeK (by its dim) through
// the loader, a prefill and a decode step. Throws streamllm::Error.
void run_gguf_model(const std::shared_ptr<const formats::GgufFile>& f);

// The same for a llama2.c checkpoint of FuzzShape at path.
void run_llama2c_model(const std::string& path);

}  // namespace streamllm::fuzz
