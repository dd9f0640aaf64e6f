// Matrices copied once, at load, into the layout their kernels read on this
// ISA (a row's repack in the kernel table: on AVX-512, Q8_0 and Q4_0 rows to
// 16-block groups, quant/interleaved.hpp). The file's own blocks are views
// into the mapping; the repacked copy is memory of our own, the same size.
// llama.cpp does the same on CPUs with AMX (it repacks Q4_0, Q8_0 and
// K-quant weights at load).
//
// The cost: the matrices' bytes once more in memory, while the file's pages
// stay mapped. A mapped file's pages are only the page cache's to keep, and
// the model never reads them again; they are released after the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "streamllm/core/memory.hpp"
#include "streamllm/core/tensor.hpp"
#include "streamllm/kernels/matmul/kernel_table.hpp"

namespace streamllm::kernels {

// Whether weights are repacked at load: yes, unless a test or benchmark
// turned it off to run the file's layout.
inline bool& repack_at_load() {
  static bool on = true;
  return on;
}

namespace detail {
// The repacked copy, and whatever kept the file's views alive.
struct RepackedWeights {
  std::shared_ptr<const void> source;
  AlignedVector<std::byte> bytes;
};

// Tells the kernel the file's pages of a view are no longer needed: they are
// the page cache's, and come back from the file if anything reads them.
// (MADV_PAGEOUT never loses data, so a view that is not of a mapped file,
// or that another model still reads, is safe too.)
inline void release_pages(const TensorView& v) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
  advise_whole_pages(v.data, static_cast<std::size_t>(v.bytes()), MADV_PAGEOUT);
#else
  (void)v;
#endif
}
}  // namespace detail

// Repacks, on `isa`, every matrix whose row says so, into one buffer; each
// such view then points there. `source` kept the views alive; pages at
// `still_read` (the embedding table, which a tied classifier shares) are not
// released. Returns the buffer's owner (which keeps `source`), or null if
// nothing was repacked.
inline std::shared_ptr<const void> repack_matrices(std::span<TensorView* const> matrices, std::shared_ptr<const void> source,
                                                   const std::byte* still_read, Isa isa = active_isa()) {
  if (!repack_at_load()) return nullptr;
  std::size_t total = 0;
  for (const TensorView* m : matrices)
    if (matmul_kernel(m->type, isa).repack) total += static_cast<std::size_t>(m->bytes());
  if (total == 0) return nullptr;
  auto storage = std::make_shared<detail::RepackedWeights>();
  storage->source = std::move(source);
  storage->bytes.resize(total);
  std::byte* at = storage->bytes.data();
  for (TensorView* m : matrices) {
    const MatmulKernel& row = matmul_kernel(m->type, isa);
    if (!row.repack) continue;
    row.repack(*m, at);
    if (m->data != still_read) detail::release_pages(*m);
    *m = TensorView{row.repacked_type, at, m->rows, m->cols, m->row_stride};
    at += static_cast<std::size_t>(m->bytes());
  }
  return storage;
}

}  // namespace streamllm::kernels
