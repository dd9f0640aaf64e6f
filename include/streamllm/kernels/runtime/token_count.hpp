// A run-time token count turned into the compile-time one the kernels are
// unrolled for.
#pragma once

#include <cstddef>
#include <utility>

namespace streamllm::kernels {

namespace detail {
template <int Max, class F, int... I>
inline void with_count(std::size_t n, F& f, std::integer_sequence<int, I...>) {
  const bool called = ((n == static_cast<std::size_t>(I + 1) ? (f.template operator()<I + 1>(), true) : false) || ...);
  if (!called) f.template operator()<Max>();
}
}  // namespace detail

// Calls f.template operator()<NT>() for NT = n when 1 <= n < Max, and for
// NT = Max otherwise (the callers pass at most Max).
template <int Max, class F>
inline void with_count(std::size_t n, F&& f) {
  detail::with_count<Max>(n, f, std::make_integer_sequence<int, Max - 1>{});
}

}  // namespace streamllm::kernels
