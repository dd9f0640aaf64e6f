// What this CPU can run, read once per process (CPUID and the OS's saved
// register state). Kernels that need more than the build's baseline are
// chosen here, at one place; tests may force a path to compare it with the rest.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace streamllm::kernels {

struct CpuFeatures {
  bool avx512 = false;       // F + BW + VL + DQ, with the OS saving ZMM state
  bool avx512_vnni = false;  // vpdpbusd
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_vbmi = false;  // vpermb
  bool f16c = false;
  bool avx2_fma = false;     // AVX2 and FMA, with the OS saving YMM state
  // vdpbf16ps retires at least as many FLOPs as vfmadd231ps. AMD's Zen 4
  // and 5 do (Zen 5 here: 545 against 272 GFLOP/s a thread); Intel's cores
  // with AVX512-BF16 do not (a Sapphire Rapids Xeon here: 79 against 157,
  // ../shared/tools/machine-limits/peak.c), and there bf16 weights are faster
  // widened to f32 for the f32 tiles than multiplied as bf16 pairs.
  bool bf16_dot_full_rate = false;
};

inline CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const bool amd = b == 0x68747541 && d == 0x69746E65 && c == 0x444D4163;  // "AuthenticAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave) return f;
  unsigned xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool zmm_state = (xlo & 0xE6) == 0xE6;  // SSE, AVX, opmask, ZMM0-15 high, ZMM16-31
  const bool ymm_state = (xlo & 0x6) == 0x6;     // SSE, AVX
  const bool fma = (c >> 12) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2_fma = ymm_state && fma && ((b >> 5) & 1);
  const bool avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  f.avx512 = zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && ((c >> 11) & 1);
  f.avx512_vbmi = f.avx512 && ((c >> 1) & 1);
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = f.avx512 && ((a >> 5) & 1);
  f.bf16_dot_full_rate = f.avx512_bf16 && amd;
#endif
  return f;
}

// The kernel families, fastest first. Avx2: the AVX2 decode kernels
// (x86_avx2.hpp) for F16, BF16, Q8_0 and Q4_0, the portable paths for the rest.
enum class Isa { Avx512Bf16Vnni, Avx2, Portable };

inline const char* to_string(Isa isa) {
  return isa == Isa::Avx512Bf16Vnni ? "avx512-bf16-vnni" : isa == Isa::Avx2 ? "avx2" : "portable (xsimd)";
}

// The path the typed kernels take: the best this CPU has, unless a test forced one.
inline Isa& active_isa() {
  static Isa isa = [] {
    const CpuFeatures f = detect_cpu_features();
    // (Every CPU with BF16 and VNNI has VBMI, but Cooper Lake; it takes the portable path.)
    if (f.avx512 && f.avx512_vnni && f.avx512_bf16 && f.avx512_vbmi && f.f16c) return Isa::Avx512Bf16Vnni;
    return f.avx2_fma && f.f16c ? Isa::Avx2 : Isa::Portable;
  }();
  return isa;
}

// Whether the prefill of BF16 and K-quant weights takes the bf16 tiles
// (vdpbf16ps; activations rounded to bf16) or the f32 tiles (weights widened
// to f32 a block at a time) on the AVX-512 path: the faster on this CPU,
// unless a test forced one.
inline bool& bf16_tiles() {
  static bool use = detect_cpu_features().bf16_dot_full_rate;
  return use;
}

}  // namespace streamllm::kernels
