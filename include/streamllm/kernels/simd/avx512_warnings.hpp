// GCC 12's AVX-512 intrinsics start some results from a self-initialised
// "undefined" register, which -Wuninitialized reports wherever they are
// inlined (GCC bug 105593, fixed in GCC 13). Code between these two marks
// initialises everything it reads; the marks silence the false reports there
// and nowhere else (every compiler but GCC 12 and older sees nothing).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#define STREAMLLM_BEGIN_AVX512_INTRINSICS                                              \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define STREAMLLM_END_AVX512_INTRINSICS _Pragma("GCC diagnostic pop")
#else
#define STREAMLLM_BEGIN_AVX512_INTRINSICS
#define STREAMLLM_END_AVX512_INTRINSICS
#endif
