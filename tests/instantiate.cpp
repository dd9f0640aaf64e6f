// The one translation unit that compiles the models of the test shapes
// (declared extern in common.hpp), and the kernels every test program runs
// (STREAMLLM_KERNELS_IN_ONE_UNIT, tests/CMakeLists.txt).
#define STREAMLLM_KERNELS_UNIT
#include "common.hpp"

template class streamllm::Llama<streamllm::presets::Stories260K>;
template class streamllm::Llama<test::WideInt8>;
template class streamllm::Llama<test::Padded260K>;
template class streamllm::Llama<test::Llama3Tiny>;
