#include "fuzz_models.hpp"

#include "fuzz_shape.hpp"
#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/loaders/gguf_model.hpp"
#include "streamllm/loaders/llama2c.hpp"
#include "streamllm/model/llama.hpp"

namespace streamllm::fuzz {
namespace {

template <class Config>
void run(Llama<Config> model) {
  KVCache<Config> cache;
  const TokenId prompt[] = {1, 3, 5};
  (void)model.prefill(prompt, cache);
  (void)model.decode(2, cache);
}

}  // namespace

void run_gguf_model(const std::shared_ptr<const formats::GgufFile>& f) {
  if (loaders::gguf_shape(*f).dim == FuzzShapeK::Dim)
    run(Llama<FuzzShapeK>(loaders::load_gguf<FuzzShapeK>(f)));
  else
    run(Llama<FuzzShape>(loaders::load_gguf<FuzzShape>(f)));
}

void run_llama2c_model(const std::string& path) { run(Llama<FuzzShape>(loaders::load_llama2c<FuzzShape>(path))); }

}  // namespace streamllm::fuzz
