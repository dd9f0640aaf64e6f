// Must not compile: 4 sinks + a window of 600 exceed stories260K's MaxSeq (512).
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/model/presets.hpp"

int main() {
  streamllm::SinkWindowKVCache<streamllm::presets::Stories260K, 4, 600> cache;
  return static_cast<int>(cache.capacity());
}
