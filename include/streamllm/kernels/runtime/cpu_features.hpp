// What this CPU can run, read once per process (CPUID and the OS's saved
// register state). Kernels that need more than the build's baseline are
// chosen here, at one place; tests may choose a path for a scope (ScopedIsa)
// to compare it with the rest.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "streamllm/core/error.hpp"

namespace streamllm::kernels {

struct CpuFeatures {
  bool avx512 = false;       // F + BW + VL + DQ, with the OS saving ZMM state
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_vbmi = false;  // vpermb
  bool f16c = false;
  bool avx2_fma = false;  // AVX2 and FMA, with the OS saving YMM state
  // vdpbf16ps retires at least as many FLOPs as vfmadd231ps. AMD's Zen 4
  // and 5 do; Intel's cores with AVX512-BF16 do not (../shared/tools/
  // machine-limits/peak.c measures both), and there bf16 weights are faster
  // widened to f32 for the f32 tiles than multiplied as bf16 pairs.
  bool bf16_dot_full_rate = false;
  // One token's AVX-512 int8 decode (Q8_0, Q4_0 and IQ4_NL in groups of 16
  // blocks) reads a thread's rows as one sequential stream, without
  // software prefetches: on Zen 4 (AMD family 19h) the hardware prefetcher
  // keeps one stream fed faster than the four prefetched streams a Zen 5
  // reads fastest (TinyLlama Q4_0 decode on one thread 42-49 against 30-33
  // tok/s; docs/kernel-measurements.md).
  bool decode_one_stream = false;
};

inline CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const bool amd = b == 0x68747541 && d == 0x69746E65 && c == 0x444D4163;  // "AuthenticAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const unsigned base_family = (a >> 8) & 0xF, family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
  const bool osxsave = (c >> 27) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  unsigned xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool zmm_state = (xlo & 0xE6) == 0xE6;  // SSE, AVX, opmask, ZMM0-15 high, ZMM16-31
  const bool ymm_state = (xlo & 0x6) == 0x6;    // SSE, AVX
  const bool fma = (c >> 12) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = ymm_state && fma && ((b >> 5) & 1);
  const bool avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  f.avx512 = zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && ((c >> 11) & 1);
  f.avx512_vbmi = f.avx512 && ((c >> 1) & 1);
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = f.avx512 && ((a >> 5) & 1);
  f.bf16_dot_full_rate = f.avx512_bf16 && amd;
  f.decode_one_stream = f.avx512 && amd && family == 0x19;
#endif
  return f;
}

// The kernel families, fastest first. Avx2: the AVX2 decode kernels
// (kernels/matmul/avx2/) for F16, BF16 and the quantised types, the portable paths for the rest.
enum class Isa { Avx512Bf16Vnni, Avx2, Portable };

inline const char* to_string(Isa isa) {
  return isa == Isa::Avx512Bf16Vnni ? "avx512-bf16-vnni" : isa == Isa::Avx2 ? "avx2" : "portable (xsimd)";
}

// The family the environment variable STREAMLLM_ISA caps the choice at:
// avx512, avx2 or portable (unset or empty: no cap). A machine so runs as
// one with less would (the tests of an AVX2-only CPU on an AVX-512 one); a
// cap above what the CPU has changes nothing.
inline Isa isa_cap_from_env() {
  const char* v = std::getenv("STREAMLLM_ISA");
  if (v == nullptr || *v == '\0') return Isa::Avx512Bf16Vnni;
  const std::string s = v;
  if (s == "avx512") return Isa::Avx512Bf16Vnni;
  if (s == "avx2") return Isa::Avx2;
  if (s == "portable") return Isa::Portable;
  throw Error("STREAMLLM_ISA='" + s + "': expected avx512, avx2 or portable");
}

// The fastest kernel family this CPU runs (within STREAMLLM_ISA's cap).
inline Isa best_isa() {
  static const Isa isa = [] {
    const CpuFeatures f = detect_cpu_features();
    // (Every CPU with BF16 and VNNI has VBMI but Cooper Lake, which takes the AVX2 family.)
    Isa best = Isa::Portable;
    if (f.avx512 && f.avx512_vnni && f.avx512_bf16 && f.avx512_vbmi && f.f16c)
      best = Isa::Avx512Bf16Vnni;
    else if (f.avx2_fma && f.f16c)
      best = Isa::Avx2;
    return std::max(best, isa_cap_from_env());  // the slower of the two (fastest first)
  }();
  return isa;
}

// Whether this CPU runs the kernels of `isa`: the best it has and every
// slower family (a CPU of the AVX-512 family has all the AVX2 one needs).
inline bool can_run(Isa isa) { return static_cast<int>(isa) >= static_cast<int>(best_isa()); }

// STREAMLLM_BF16_TILES=0 or 1 overrides the CPU's choice of the bf16 tiles
// (bf16_tiles(), below): 0 keeps F16 and BF16 prefill in f32 arithmetic on
// every CPU (the weights and tokens as they are), 1 takes the bf16 tiles
// where the CPU has vdpbf16ps at all.
inline bool bf16_tiles_from_env(const CpuFeatures& f) {
  const char* v = std::getenv("STREAMLLM_BF16_TILES");
  if (v == nullptr || *v == '\0') return f.bf16_dot_full_rate;
  const std::string s = v;
  if (s == "0") return false;
  if (s == "1") return f.avx512_bf16;
  throw Error("STREAMLLM_BF16_TILES='" + s + "': expected 0 or 1");
}

namespace detail {
inline std::atomic<Isa>& chosen_isa() {
  static std::atomic<Isa> isa{best_isa()};
  return isa;
}
inline std::atomic<bool>& chosen_bf16_tiles() {
  static std::atomic<bool> use{bf16_tiles_from_env(detect_cpu_features())};
  return use;
}
inline std::atomic<bool>& chosen_decode_one_stream() {
  static std::atomic<bool> use{detect_cpu_features().decode_one_stream};
  return use;
}
}  // namespace detail

// The family the typed kernels take: best_isa(), unless a ScopedIsa chose another.
inline Isa active_isa() { return detail::chosen_isa().load(std::memory_order_relaxed); }

// Whether the prefill of BF16 and F16 weights takes the bf16 tiles
// (vdpbf16ps; tokens, and F16's weights, rounded to bf16) or the f32 tiles
// (weights widened to f32 a block at a time) on the AVX-512 path: the faster
// on this CPU, unless STREAMLLM_BF16_TILES or a ScopedBf16Tiles chose.
inline bool bf16_tiles() { return detail::chosen_bf16_tiles().load(std::memory_order_relaxed); }

// Whether one token's AVX-512 int8 group decode reads a thread's rows as one
// stream without software prefetches, or as four prefetched streams: the
// faster on this CPU (CpuFeatures::decode_one_stream), unless a
// ScopedDecodeOneStream chose.
inline bool decode_one_stream() { return detail::chosen_decode_one_stream().load(std::memory_order_relaxed); }

// For the life of this object the kernels take `isa`: a test of one family
// against another, a benchmark of a slower one. One a CPU lacks is an Error.
// Not for use while other threads run kernels: they may see either family.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : saved_(active_isa()) {
    if (!can_run(isa))
      throw Error(std::string("kernels: this CPU cannot run the ") + to_string(isa) +
                  " kernels (its best: " + to_string(best_isa()) + ")");
    detail::chosen_isa().store(isa, std::memory_order_relaxed);
  }
  ~ScopedIsa() { detail::chosen_isa().store(saved_, std::memory_order_relaxed); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa saved_;
};

// The same for a choice made once per CPU (Choice: its flag), to measure or
// test the other way on this one.
template <std::atomic<bool>& (*Choice)()>
class ScopedChoice {
 public:
  explicit ScopedChoice(bool on) : saved_(Choice().load(std::memory_order_relaxed)) {
    Choice().store(on, std::memory_order_relaxed);
  }
  ~ScopedChoice() { Choice().store(saved_, std::memory_order_relaxed); }
  ScopedChoice(const ScopedChoice&) = delete;
  ScopedChoice& operator=(const ScopedChoice&) = delete;

 private:
  bool saved_;
};
using ScopedBf16Tiles = ScopedChoice<detail::chosen_bf16_tiles>;
using ScopedDecodeOneStream = ScopedChoice<detail::chosen_decode_one_stream>;

}  // namespace streamllm::kernels
