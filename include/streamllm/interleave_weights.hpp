// A model's Q8_0 and Q4_0 matrices copied once, at load, into the layout the
// AVX-512 int8 kernels read (quant/interleaved.hpp). The file's own blocks
// are views into the mapping; the interleaved copy is memory of our own, the
// same size. llama.cpp does the same on CPUs with AMX (it repacks Q4_0, Q8_0
// and K-quant weights at load).
//
// The cost: the matrices' bytes once more in memory, while the file's pages
// stay mapped. A mapped file's pages are only the page cache's to keep, and
// the model never reads them again; they are released after the copy.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "streamllm/kernels/cpu_features.hpp"
#include "streamllm/kernels/threading.hpp"
#include "streamllm/kernels/x86_avx512.hpp"
#include "streamllm/memory.hpp"
#include "streamllm/quant/interleaved.hpp"
#include "streamllm/weights.hpp"

namespace streamllm {

// Whether a model built on the AVX-512 path interleaves its int8 matrices:
// yes, unless a test or benchmark turned it off to run the file's layout.
inline bool& interleave_int8_at_load() {
  static bool on = true;
  return on;
}

namespace detail {
// The interleaved copy, and whatever kept the file's views alive.
struct InterleavedWeights {
  std::shared_ptr<const void> source;
  AlignedVector<std::byte> bytes;
};

inline void interleave_matrix(const TensorView& from, std::byte* to) {
  const DType base = from.type;
  const auto stride = static_cast<std::size_t>(from.row_stride);
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (std::int64_t r = 0; r < from.rows; ++r) {
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
    kernels::avx512::interleave_row_avx512(base, from.row(r), to + static_cast<std::size_t>(r) * stride,
                                           static_cast<std::size_t>(from.cols));
#else
    quant::interleave_row(base, from.row(r), to + static_cast<std::size_t>(r) * stride, from.cols);
#endif
  }
}

// Tells the kernel the file's pages of a view are no longer needed: they are
// the page cache's, and come back from the file if anything reads them.
// (MADV_PAGEOUT never loses data, so a view that is not of a mapped file,
// or that another model still reads, is safe too.)
inline void release_pages(const TensorView& v) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(v.data), end = begin + static_cast<std::uintptr_t>(v.bytes());
  const std::uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
#else
  (void)v;
#endif
}
}  // namespace detail

// The weights with every Q8_0 / Q4_0 matrix (the layers' and the
// classifier; the embedding table stays, rows are looked up there) in the
// interleaved layout, when the int8 kernels on this path read it.
template <class Config>
ModelWeights<Config> interleave_int8_weights(ModelWeights<Config> w, kernels::Isa isa = kernels::active_isa()) {
  if (isa != kernels::Isa::Avx512Bf16Vnni || !interleave_int8_at_load()) return w;
  std::vector<TensorView*> matrices;
  for (LayerWeights& l : w.layers)
    for (TensorView* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_down, &l.w_up}) matrices.push_back(m);
  matrices.push_back(&w.classifier);
  std::size_t total = 0;
  for (const TensorView* m : matrices)
    if (m->type == DType::Q8_0 || m->type == DType::Q4_0) total += static_cast<std::size_t>(m->bytes());
  if (total == 0) return w;

  auto storage = std::make_shared<detail::InterleavedWeights>();
  storage->source = w.owner;
  storage->bytes.resize(total);
  std::byte* at = storage->bytes.data();
  for (TensorView* m : matrices) {
    if (m->type != DType::Q8_0 && m->type != DType::Q4_0) continue;
    detail::interleave_matrix(*m, at);
    if (m->data != w.token_embedding.data) detail::release_pages(*m);
    *m = TensorView{quant::interleaved_type(m->type), at, m->rows, m->cols, m->row_stride};
    at += static_cast<std::size_t>(m->bytes());
  }
  w.owner = storage;
  return w;
}

}  // namespace streamllm
