// Writes a llama2.c checkpoint of any shape with random weights, for tests of
// the example programs (e.g. a shape no preset matches).
//   write_test_model OUT dim hidden layers heads kv_heads vocab seq_len
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "streamllm/generation/sampler.hpp"
#include "streamllm/loaders/llama2c.hpp"

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s OUT dim hidden layers heads kv_heads vocab seq_len\n", argv[0]);
    return 2;
  }
  streamllm::ModelShape s;
  std::int64_t* fields[] = {&s.dim, &s.hidden_dim, &s.layers, &s.heads, &s.kv_heads, &s.vocab, &s.max_seq};
  for (int i = 0; i < 7; ++i) *fields[i] = std::atoll(argv[i + 2]);
  std::vector<float> w(static_cast<std::size_t>(streamllm::loaders::llama2c_float_count(s, true).value()));
  streamllm::Rng rng(1);
  for (auto& x : w) x = (rng.uniform() - 0.5f) * 0.04f;
  streamllm::loaders::write_llama2c(argv[1], s, true, w);
  return 0;
}
