// The one translation unit that compiles the models of the test shapes
// (declared extern in common.hpp).
#include "common.hpp"

template class streamllm::Llama<streamllm::presets::Stories260K>;
template class streamllm::Llama<test::WideInt8>;
template class streamllm::Llama<test::Padded260K>;
template class streamllm::Llama<test::Llama3Tiny>;
