// Weight element types, in the exact block layouts GGUF uses, so that files
// written by llama.cpp are views, not conversions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

namespace streamllm {

// The numeric values are GGUF's ggml_type ids.
enum class DType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  // In memory only, never in a file: Q8_0 and Q4_0 rows interleaved in
  // groups of 16 blocks for the AVX-512 int8 kernels (quant/interleaved.hpp).
  // Same bytes per row as their base types.
  Q8_0x16 = 1008,
  Q4_0x16 = 1002,
};

struct DTypeTraits {
  std::string_view name;
  std::int64_t block_elems;  // elements per block
  std::int64_t block_bytes;  // bytes per block
};

constexpr DTypeTraits traits(DType t) {
  switch (t) {
    case DType::F32: return {"F32", 1, 4};
    case DType::F16: return {"F16", 1, 2};
    case DType::BF16: return {"BF16", 1, 2};
    case DType::Q8_0: return {"Q8_0", 32, 34};
    case DType::Q4_0: return {"Q4_0", 32, 18};
    case DType::Q4_1: return {"Q4_1", 32, 20};
    case DType::Q5_0: return {"Q5_0", 32, 22};
    case DType::Q5_1: return {"Q5_1", 32, 24};
    case DType::Q2_K: return {"Q2_K", 256, 84};
    case DType::Q3_K: return {"Q3_K", 256, 110};
    case DType::Q4_K: return {"Q4_K", 256, 144};
    case DType::Q5_K: return {"Q5_K", 256, 176};
    case DType::Q6_K: return {"Q6_K", 256, 210};
    case DType::IQ4_NL: return {"IQ4_NL", 32, 18};
    case DType::IQ4_XS: return {"IQ4_XS", 256, 136};
    case DType::Q8_0x16: return {"Q8_0x16", 32, 34};
    case DType::Q4_0x16: return {"Q4_0x16", 32, 18};
  }
  return {"?", 0, 0};
}

// Every type a file may hold that streamllm reads: the list the loaders,
// the converter's checks, the error messages and the tests take.
inline constexpr DType kFileTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                                       DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,   DType::Q3_K,
                                       DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

constexpr bool is_known_dtype(std::uint32_t id) {
  for (DType t : kFileTypes)
    if (static_cast<std::uint32_t>(t) == id) return true;
  return false;
}

// "F32, F16, ... and Q6_K": for messages.
inline std::string file_type_names() {
  std::string s;
  const std::size_t n = std::size(kFileTypes);
  for (std::size_t i = 0; i < n; ++i) s += (i == 0 ? "" : i + 1 == n ? " and " : ", ") + std::string(traits(kFileTypes[i]).name);
  return s;
}

constexpr std::string_view dtype_name(DType t) { return traits(t).name; }

// The name ggml gives a type id, for the ones streamllm does not read too
// ("IQ2_XXS"); empty for an id ggml never used.
constexpr std::string_view ggml_type_name(std::uint32_t id) {
  constexpr std::string_view names[] = {
      "F32",    "F16",      "Q4_0",     "Q4_1",     "Q4_2",  "Q4_3",  "Q5_0",       "Q5_1",       "Q8_0",       "Q8_1",
      "Q2_K",   "Q3_K",     "Q4_K",     "Q5_K",     "Q6_K",  "Q8_K",  "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",    "IQ1_S",
      "IQ4_NL", "IQ3_S",    "IQ2_S",    "IQ4_XS",   "I8",    "I16",   "I32",        "I64",        "F64",        "IQ1_M",
      "BF16",   "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return id < std::size(names) ? names[id] : std::string_view();
}

// "IQ2_XXS (type 16)", or "an unknown type 99" for an id ggml never used: for messages.
inline std::string ggml_type_label(std::uint32_t id) {
  const std::string_view name = ggml_type_name(id);
  return name.empty() ? "an unknown type " + std::to_string(id) : std::string(name) + " (type " + std::to_string(id) + ")";
}

// The K-quants: super-blocks of 256 with a scale per sub-block (and, Q4_K
// and Q5_K, a min).
constexpr bool is_kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// Blocks of 32 unsigned quants with a scale and an offset, x = d q + m:
// Q4_1, Q5_1, and Q5_0 (m = -16 d).
constexpr bool is_unsigned_blocks(DType t) { return t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1; }

// Bytes of one row of `cols` elements; cols must be a multiple of the block size.
constexpr std::int64_t row_bytes(DType t, std::int64_t cols) {
  const auto tr = traits(t);
  return cols / tr.block_elems * tr.block_bytes;
}

// ---- scalar conversions of the 16-bit float formats --------------------------

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

// Round to nearest even, as llama.cpp does (NaN stays NaN).
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 64);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// IEEE half to float, exact for every input (subnormals, inf, NaN).
inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | std::uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

// Float to IEEE half, round to nearest even.
inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                    // subnormal half (or zero): scale into integer mantissa
    const float a = std::bit_cast<float>(abs) * 16777216.0f;  // * 2^24
    const std::uint32_t m = static_cast<std::uint32_t>(a);
    const float frac = a - static_cast<float>(m);
    std::uint32_t r = m + ((frac > 0.5f || (frac == 0.5f && (m & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

}  // namespace streamllm
