// The element types a KV cache stores keys and values in, and their rows'
// bytes. A cached row is one token's keys (or values) of one layer, KVDim
// elements: f32 (the reference), f16, bf16, or GGUF's Q8_0 / Q4_0 blocks of
// 32 laid along the row (a block may hold parts of two heads when a head is
// narrower than 32). Attention (kernels/ops/attention.hpp) reads these rows
// as they are; the caches (cache/) only write them.
//
// Q4_0 has 16 levels: a head's few large outlier channels would set every
// block's scale and leave the rest a level or two. Its rows (and Q8_0's) are
// therefore stored rotated by a Hadamard transform of each head (kernels/ops/
// hadamard.hpp), which spreads an outlier over the head, as llama.cpp and
// ik_llama.cpp do for quantised caches. Keys are rotated with the query
// alike, so scores are unchanged; values are rotated when stored and the
// attention output is rotated back (the transform is its own inverse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "streamllm/core/dtype.hpp"
#include "streamllm/core/error.hpp"
#include "streamllm/quant/blocks.hpp"

namespace streamllm {

enum class KVType : std::uint8_t { F32 = 0, F16 = 1, BF16 = 2, Q8_0 = 3, Q4_0 = 4 };
inline constexpr KVType kKVTypes[] = {KVType::F32, KVType::F16, KVType::BF16, KVType::Q8_0, KVType::Q4_0};

// The types of a cache's keys and of its values, chosen apart.
struct KVTypes {
  KVType k = KVType::F32, v = KVType::F32;
  bool operator==(const KVTypes&) const = default;
};

constexpr std::string_view kv_type_name(KVType t) {
  switch (t) {
    case KVType::F32: return "f32";
    case KVType::F16: return "f16";
    case KVType::BF16: return "bf16";
    case KVType::Q8_0: return "q8_0";
    case KVType::Q4_0: return "q4_0";
  }
  return "?";
}
inline std::string kv_types_name(KVTypes t) {
  return "K " + std::string(kv_type_name(t.k)) + ", V " + std::string(kv_type_name(t.v));
}

// A type by its name (llama.cpp's --cache-type-k/-v names); `what` says
// where the name came from, for the error.
inline KVType parse_kv_type(std::string_view name, std::string_view what = "cache type") {
  for (const KVType t : kKVTypes)
    if (name == kv_type_name(t)) return t;
  throw InputError(std::string(what) + " '" + std::string(name) + "' is not a KV cache type (f32, f16, bf16, q8_0, q4_0)");
}

// Elements per block, and bytes per block.
constexpr std::size_t kv_block(KVType t) { return t == KVType::Q8_0 || t == KVType::Q4_0 ? quant::kQK : 1; }
constexpr std::size_t kv_block_bytes(KVType t) {
  switch (t) {
    case KVType::F32: return 4;
    case KVType::F16:
    case KVType::BF16: return 2;
    case KVType::Q8_0: return sizeof(quant::BlockQ8_0);
    case KVType::Q4_0: return sizeof(quant::BlockQ4_0);
  }
  return 4;
}
// Bytes of a row of n elements (n a multiple of the block: kv_check_row).
constexpr std::size_t kv_row_bytes(KVType t, std::size_t n) { return n / kv_block(t) * kv_block_bytes(t); }

// Whether rows of this type are stored Hadamard-rotated per head (above).
// Q8_0 too: rotated, its mean KL divergence from the f32 cache on
// stories260K halved (0.0023 to 0.0011; docs/performance.md, "KV cache types").
constexpr bool kv_rotated(KVType t) { return t == KVType::Q4_0 || t == KVType::Q8_0; }

// A row of n elements must be whole blocks of the type.
inline void kv_check_row(KVType t, std::size_t n, std::string_view what) {
  if (n % kv_block(t) != 0)
    throw InputError(std::string(what) + ": a " + std::string(kv_type_name(t)) + " cache stores rows of whole blocks of " +
                     std::to_string(kv_block(t)) + " elements, and this one's keys and values are " + std::to_string(n) +
                     " wide (heads x head dim" + (n < 32 ? "; a model split over processes holds a slice" : "") +
                     "): use f32, f16 or bf16");
}

// One row of n floats in the type.
inline void kv_encode_row(KVType t, const float* x, std::size_t n, std::byte* out) {
  switch (t) {
    case KVType::F32: std::memcpy(out, x, n * sizeof(float)); return;
    case KVType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KVType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    // The weights' quantisers (quant/blocks.hpp), without quantize_row's range
    // check: a cache row is written inside a forward pass, which must not throw.
    case KVType::Q8_0: return quant::quantize_blocks<quant::BlockQ8_0, quant::kQK>(x, static_cast<std::int64_t>(n), out);
    case KVType::Q4_0: return quant::quantize_blocks<quant::BlockQ4_0, quant::kQK>(x, static_cast<std::int64_t>(n), out);
  }
}

// Elements [first, first + n) of a row, as floats: the scalar reading every
// kernel's is checked against.
inline void kv_decode(KVType t, const std::byte* row, std::size_t first, std::size_t n, float* out) {
  for (std::size_t i = first; i < first + n; ++i) {
    float x = 0;
    switch (t) {
      case KVType::F32: std::memcpy(&x, row + 4 * i, 4); break;
      case KVType::F16:
      case KVType::BF16: {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        x = t == KVType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        break;
      }
      case KVType::Q8_0: {
        const auto& b = *reinterpret_cast<const quant::BlockQ8_0*>(row + i / quant::kQK * sizeof(quant::BlockQ8_0));
        x = f16_to_f32(b.d) * static_cast<float>(b.qs[i % quant::kQK]);
        break;
      }
      case KVType::Q4_0: {
        const auto& b = *reinterpret_cast<const quant::BlockQ4_0*>(row + i / quant::kQK * sizeof(quant::BlockQ4_0));
        const std::size_t j = i % quant::kQK;
        const int q = j < quant::kQK / 2 ? b.qs[j] & 15 : b.qs[j - quant::kQK / 2] >> 4;
        x = f16_to_f32(b.d) * static_cast<float>(q - 8);
        break;
      }
    }
    out[i - first] = x;
  }
}

// A row replaced by what the type gives back for it: the new tokens of a
// forward call are attended to as the cache will hold them, so a text gives
// the same logits whether it is read in one call or token by token.
inline void kv_round_trip(KVType t, float* x, std::size_t n) {
  if (t == KVType::F32) return;
  alignas(64) std::byte row[kv_block_bytes(KVType::F32) * quant::kQK];
  for (std::size_t b = 0; b < n; b += quant::kQK) {  // a block (or 32 elements of a float type) at a time
    const std::size_t m = std::min<std::size_t>(quant::kQK, n - b);
    kv_encode_row(t, x + b, m, row);
    kv_decode(t, row, 0, m, x + b);
  }
}

}  // namespace streamllm
