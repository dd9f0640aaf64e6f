// streamllm: Llama 2 on the CPU, header-only. Include this one header.
#pragma once

#include "streamllm/attention.hpp"
#include "streamllm/cache/kv_cache.hpp"
#include "streamllm/cache/sink_window_cache.hpp"
#include "streamllm/chat.hpp"
#include "streamllm/config.hpp"
#include "streamllm/detokenizer.hpp"
#include "streamllm/error.hpp"
#include "streamllm/generate.hpp"
#include "streamllm/io/llama2c.hpp"
#include "streamllm/io/model_file.hpp"
#include "streamllm/model.hpp"
#include "streamllm/presets.hpp"
#include "streamllm/sampler.hpp"
#include "streamllm/scheduler.hpp"
#include "streamllm/tokenizer.hpp"
#include "streamllm/weights.hpp"
