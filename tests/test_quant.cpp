// Weight types: conversions, quantisers, and every typed matrix kernel (AVX-512
// and portable) against the exact oracle (rows dequantised, product in double).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "common.hpp"
#include "streamllm/kernels/matmul/avx2/rows.hpp"  // the kernels by name: the table is only declared here
#include "streamllm/kernels/matmul/avx512/rows.hpp"
#include "streamllm/kernels/matmul/matmul.hpp"
#include "streamllm/kernels/matmul/portable/rows.hpp"
#include "streamllm/quant/blocks.hpp"

using namespace streamllm;
namespace k = streamllm::kernels;

namespace {

std::vector<float> normal(std::size_t n, std::uint32_t seed, float std = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// A matrix quantised row by row, and the view kernels take.
struct Matrix {
  std::vector<std::byte> bytes;
  TensorView view;
  Matrix(DType t, const std::vector<float>& w, std::int64_t rows, std::int64_t cols)
      : bytes(static_cast<std::size_t>(row_bytes(t, cols) * rows)) {
    for (std::int64_t r = 0; r < rows; ++r)
      quant::quantize_row(t, w.data() + r * cols, cols, bytes.data() + r * row_bytes(t, cols));
    view = TensorView::dense(t, bytes.data(), rows, cols);
  }
};

// Every type a file may hold but F32 (whose rows the quantisers do not
// touch), and the repacked forms of the model's.
const std::vector<DType> kTypes = [] {
  std::vector<DType> v;
  for (DType t : kFileTypes)
    if (t != DType::F32) v.push_back(t);
  v.push_back(DType::Q8_0x16);
  v.push_back(DType::Q4_0x16);
  return v;
}();

// The CPU's own conversions, for builds without -march=native too (called
// only when the CPU has F16C; none on other architectures).
#if defined(__x86_64__) || defined(__i386__)
bool has_f16c() { return k::detect_cpu_features().f16c; }
__attribute__((target("f16c"))) float cpu_f16_to_f32(std::uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) std::uint16_t cpu_f32_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#else
bool has_f16c() { return false; }
float cpu_f16_to_f32(std::uint16_t) { return 0; }
std::uint16_t cpu_f32_to_f16(float) { return 0; }
#endif

}  // namespace

TEST_CASE("half floats convert exactly both ways, as the CPU's F16C does", "[quant]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16(f) == h);
    if (has_f16c())
      REQUIRE(std::bit_cast<std::uint32_t>(cpu_f16_to_f32(static_cast<std::uint16_t>(h))) == std::bit_cast<std::uint32_t>(f));
  }
  if (has_f16c()) {
    const auto v = normal(100000, 1, 30000.0f);
    for (float f : v) REQUIRE(f32_to_f16(f) == cpu_f32_to_f16(f));
    for (float f : {1e-8f, 6.1e-5f, 65504.0f, 65520.0f, -0.0f, 3e-7f, 2.98e-8f}) REQUIRE(f32_to_f16(f) == cpu_f32_to_f16(f));
  }
}

TEST_CASE("bfloat16 rounds to nearest even and widens exactly", "[quant]") {
  REQUIRE(f32_to_bf16(1.0f) == 0x3F80);
  REQUIRE(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x3F808000u))) == std::bit_cast<float>(0x3F800000u));  // tie to even
  REQUIRE(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x3F818000u))) == std::bit_cast<float>(0x3F820000u));
  for (float f : normal(10000, 2)) REQUIRE(std::abs(bf16_to_f32(f32_to_bf16(f)) - f) <= std::abs(f) * 0x1p-8f);
}

TEST_CASE("each quantiser's round trip stays within its format's step", "[quant]") {
  const std::int64_t cols = 512;
  const auto w = normal(static_cast<std::size_t>(cols) * 8, 3);
  // Worst error per element relative to the largest magnitude of its block.
  // The affine types (Q4_1, Q5_1) step by (max - min) / levels, at most 2 max|x| / levels.
  const std::pair<DType, float> bounds[] = {{DType::F16, 1e-3f},      {DType::BF16, 4e-3f},     {DType::Q8_0, 1.0f / 127},
                                            {DType::Q4_0, 1.0f / 8},  {DType::Q4_1, 1.0f / 14}, {DType::Q5_0, 1.0f / 16},
                                            {DType::Q5_1, 1.0f / 30}, {DType::Q4_K, 0.15f},     {DType::Q5_K, 0.08f},
                                            {DType::Q6_K, 1.0f / 16}, {DType::Q2_K, 0.5f},      {DType::Q3_K, 0.3f},
                                            {DType::IQ4_NL, 0.16f},   {DType::IQ4_XS, 0.2f}};
  for (const auto& [t, bound] : bounds) {
    const Matrix m(t, w, 8, cols);
    std::vector<float> back(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < 8; ++r) {
      quant::dequantize_row(t, m.view.row(r), cols, back.data());
      for (std::int64_t b = 0; b < cols; b += 32) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(w[static_cast<std::size_t>(r * cols + b + j)]));
        for (int j = 0; j < 32; ++j) {
          INFO(dtype_name(t) << " row " << r << " element " << b + j);
          REQUIRE(std::abs(back[static_cast<std::size_t>(b + j)] - w[static_cast<std::size_t>(r * cols + b + j)]) <=
                  bound * amax + 1e-6f);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("typed matrix kernels equal the exact product, on every token count", "[quant][kernels]", TEST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  // rows odd (partial row groups and tiles, four decode streams of 9 rows and
  // one row left over), k with an odd number of 32-blocks where the type allows
  // it (the int8 kernels' tail), past 2048 (two slices of the f32 tiles, the
  // second carrying on the first's sums), and for F16/BF16 (blocks of 1) a k
  // that ends in a partial vector.
  for (DType t : kTypes) {
    const std::int64_t block = traits(t).block_elems == 256 ? 256 : 32;
    std::vector<std::int64_t> col_counts = {block * 3, 1024 + (block == 32 ? 96 : 256), 2048 + (block == 32 ? 96 : 256)};
    if (traits(t).block_elems == 1) col_counts.push_back(1024 + 43);
    for (std::int64_t cols : col_counts) {
      const std::int64_t rows = 37;
      const Matrix m(t, normal(static_cast<std::size_t>(rows * cols), 4, 0.05f), rows, cols);
      // 48: the decode kernel in passes where it takes that many (AVX-512
      // Q8_0 / Q4_0); 70 and 90: past them, a rest after whole groups of
      // the tiles on the decode kernel, and one the tiles pad; kTokensPerPass
      // + 44: two passes of the tiles, the second partial.
      const std::size_t counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 20, 23, 33, 48, 70, 90, k::kTokensPerPass + 44};
      for (std::size_t n : counts) {
        const std::size_t ldx = static_cast<std::size_t>(cols) + 5, ldy = static_cast<std::size_t>(rows) + 3;
        const auto x = normal(n * ldx, 5);
        std::vector<float> want(n * ldy), bound(n * ldy);
        k::scalar::matmul(m.view, x.data(), n, ldx, want.data(), ldy);
        // The error budget of each output: int8 activations (Q8_0 / Q4_0 on
        // the VNNI paths and their portable gemv; the K-quants on the VNNI
        // paths) and bf16 tiles (BF16's gemm) round each term by ~2^-8 relative.
        for (std::size_t j = 0; j < n; ++j)
          for (std::int64_t r = 0; r < rows; ++r) {
            std::vector<float> row(static_cast<std::size_t>(cols));
            quant::dequantize_row(t, m.view.row(r), cols, row.data());
            double s = 0;
            for (std::int64_t c = 0; c < cols; ++c)
              s += std::abs(double(row[static_cast<std::size_t>(c)]) * x[j * ldx + static_cast<std::size_t>(c)]);
            bound[j * ldy + static_cast<std::size_t>(r)] = static_cast<float>(s);
          }
        // On AVX-512, BF16's prefill in bf16 tiles (AMD) and in f32 tiles
        // (Intel), whichever this CPU takes.
        for (const bool bf16_tiles_chosen : {false, true}) {
          if (bf16_tiles_chosen && isa != k::Isa::Avx512Bf16Vnni) continue;
          const k::ScopedBf16Tiles forced(bf16_tiles_chosen);
          std::vector<float> got(n * ldy, 0.0f);
          k::matmul(m.view, x.data(), n, ldx, got.data(), ldy, isa);
          // Tokens up to the row's limits go to its decode kernel (in passes),
          // and past them the tiles take all but a short rest, which goes to
          // the decode kernel.
          const k::MatmulKernel& row = k::matmul_kernel(t, isa);
          const std::size_t decode_from = row.decode_from(n);
          for (std::size_t j = 0; j < n; ++j) {
            const bool on_decode = j >= decode_from;
            const bool int8_acts = on_decode ? row.activations != k::ActivationLayout::Float : row.tiles == k::Tiles::Int8;
            const bool bf16_tiles = !on_decode && row.tiles == k::Tiles::Bf16;
            const float rel = int8_acts ? 0x1p-6f : bf16_tiles ? 0x1p-7f : 1e-5f;
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::size_t i = j * ldy + static_cast<std::size_t>(r);
              INFO(dtype_name(t) << " cols " << cols << " n " << n << " isa " << k::to_string(isa)
                                 << (bf16_tiles_chosen ? " (bf16 tiles)" : "") << " row " << r << " token " << j);
              REQUIRE(std::abs(got[i] - want[i]) <= rel * bound[i] + 1e-6f);
            }
          }
        }
      }
    }
  }
}

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
TEST_CASE("F16 on the bf16 tiles gives what BF16 weights rounded from the same halves give, bit for bit", "[quant][kernels]") {
  // F16AsBf16Rows rounds each half to bf16 a block at a time; the tiles are
  // BF16's own, so the two products must agree exactly. k past one slice
  // (kKc) with a tail of the conversion's 32-wide loop; tokens for a half
  // group, whole groups and a second pass.
  if (!test::cpu_runs(k::Isa::Avx512Bf16Vnni) || !k::detect_cpu_features().avx512_bf16) return;
  const k::ScopedBf16Tiles forced(true);
  const std::int64_t rows = 29, cols = k::avx512::GemmBf16::kKc + 70;
  const auto w = normal(static_cast<std::size_t>(rows * cols), 11, 0.05f);
  const Matrix f16(DType::F16, w, rows, cols);
  std::vector<float> rounded(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(f16_to_f32(f32_to_f16(w[i]))));
  const Matrix bf16(DType::BF16, rounded, rows, cols);
  REQUIRE(k::matmul_kernel(DType::F16, k::Isa::Avx512Bf16Vnni).tiles == k::Tiles::Bf16);
  for (const std::size_t n : {std::size_t{9}, std::size_t{16}, std::size_t{45}, k::kTokensPerPass + 20}) {
    const std::size_t ldx = static_cast<std::size_t>(cols), ldy = static_cast<std::size_t>(rows);
    const auto x = normal(n * ldx, 12);
    std::vector<float> got(n * ldy), want(n * ldy);
    k::matmul(f16.view, x.data(), n, ldx, got.data(), ldy, k::Isa::Avx512Bf16Vnni);
    k::matmul(bf16.view, x.data(), n, ldx, want.data(), ldy, k::Isa::Avx512Bf16Vnni);
    INFO("n " << n);
    REQUIRE(got == want);
  }
}

TEST_CASE("STREAMLLM_BF16_TILES overrides the CPU's choice of the bf16 tiles, and a bad value is refused", "[quant][kernels]") {
  const char* saved = std::getenv("STREAMLLM_BF16_TILES");
  const std::string restore = saved != nullptr ? saved : "";
  k::CpuFeatures amd, intel;
  amd.avx512_bf16 = intel.avx512_bf16 = true;
  amd.bf16_dot_full_rate = true;
  ::unsetenv("STREAMLLM_BF16_TILES");
  CHECK(k::bf16_tiles_from_env(amd));
  CHECK_FALSE(k::bf16_tiles_from_env(intel));
  ::setenv("STREAMLLM_BF16_TILES", "0", 1);
  CHECK_FALSE(k::bf16_tiles_from_env(amd));
  ::setenv("STREAMLLM_BF16_TILES", "1", 1);
  CHECK(k::bf16_tiles_from_env(intel));
  CHECK_FALSE(k::bf16_tiles_from_env(k::CpuFeatures{}));  // no vdpbf16ps at all
  ::setenv("STREAMLLM_BF16_TILES", "yes", 1);
  CHECK_THROWS_WITH(k::bf16_tiles_from_env(amd), Catch::Contains("STREAMLLM_BF16_TILES='yes'"));
  if (saved != nullptr)
    ::setenv("STREAMLLM_BF16_TILES", restore.c_str(), 1);
  else
    ::unsetenv("STREAMLLM_BF16_TILES");
}

TEMPLATE_TEST_CASE("every row of the kernel table is complete, and its decode kernel equals its portable twin",
                   "[quant][kernels]", TEST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  {
    std::set<const k::MatmulKernel*> checked;  // every row, under one BF16 choice or the other
    for (const bool bf16 : {true, false}) {
      const k::ScopedBf16Tiles forced(bf16);
      for (const k::MatmulKernel& row : k::kernel_rows(isa)) {
        if (row.applies && !row.applies()) continue;
        const DType t = row.type, file_type = quant::base_type(t);
        INFO(dtype_name(t) << " on " << k::to_string(isa) << (bf16 ? " (bf16 tiles)" : ""));
        // What matmul and matmul_shared rely on: the lookup finds this row,
        // unless an earlier row of the type applies (BF16's full-rate row),
        // which then serves instead; this one serves under the other choice.
        REQUIRE(row.isa == isa);
        const k::MatmulKernel* found = &k::matmul_kernel(t, isa);
        if (found != &row) {
          REQUIRE((found->type == t && found->isa == isa && found < &row));
          continue;
        }
        checked.insert(&row);
        REQUIRE((row.decode && row.prefill && row.decode_tokens >= 1));
        REQUIRE((row.activations == k::ActivationLayout::Float) == (row.quantize == nullptr));
        REQUIRE((row.pack == nullptr) == (row.prefill_packed == nullptr));
        REQUIRE((row.pack == nullptr) == (row.tiles == k::Tiles::F32));  // the int8 and bf16 tiles pack the tokens
        REQUIRE((row.pack == nullptr || row.tile_chunk_rows > 0));
        REQUIRE(row.tail_tokens <= row.tile_tokens / 2);  // a rest of more than half a group: the tiles'
        REQUIRE((row.pass_tokens == 0 || (row.pass_tokens > row.decode_tokens && row.tile_tokens > 0)));
        if (row.repack) REQUIRE(k::matmul_kernel(row.repacked_type, isa).activations == row.activations);
        if (isa != k::Isa::Portable) REQUIRE(row.twin);

        // The decode kernel on every token count it serves, against the
        // twin on the file's layout with the same (plain) int8 activations:
        // the same arithmetic, the float sums in another order. A row of
        // plain int8 blocks quantises them for both (AVX2 Q2_K and Q3_K:
        // one scale per 256); the interleaved layouts hold blocks of 32.
        const std::int64_t cols = traits(file_type).block_elems == 256 ? 768 : 1024 + 96, rows = 37;
        const auto weights = normal(static_cast<std::size_t>(rows * cols), 8, 0.05f);
        const Matrix m(t, weights, rows, cols), file(file_type, weights, rows, cols);
        const auto ucols = static_cast<std::size_t>(cols), urows = static_cast<std::size_t>(rows);
        // Every count as the CPU reads rows, then one token's rows as the
        // other choice does (four prefetched streams, or one: Zen 4).
        const bool chosen = k::decode_one_stream();
        for (std::size_t pass = 0; pass <= row.decode_tokens; ++pass) {
          const std::size_t n = pass == row.decode_tokens ? 1 : pass + 1;
          const k::ScopedDecodeOneStream streams(pass == row.decode_tokens ? !chosen : chosen);
          const auto x = normal(n * ucols, 9);
          std::vector<float> fast(n * urows), twin(fast.size());
          k::QuantizedActivations own;  // the row's layout
          if (row.quantize) row.quantize(x.data(), ucols, n, ucols, own);
          row.decode(m.view, 0, urows, {x.data(), ucols, row.quantize ? &own : nullptr}, n, fast.data(), urows);
          k::QuantizedActivations xa;
          if (row.activations == k::ActivationLayout::Int8Blocks)
            row.quantize(x.data(), ucols, n, ucols, xa);
          else
            k::quantize_activations(x.data(), ucols, n, ucols, xa, static_cast<float>(row.activation_limit));
          const k::DecodeRowsFn twin_decode = row.twin ? row.twin : row.decode;
          twin_decode(file.view, 0, urows, {x.data(), ucols, &xa}, n, twin.data(), urows);
          float scale = 0;
          for (float v : twin) scale = std::max(scale, std::abs(v));
          REQUIRE(scale > 0);
          for (std::size_t i = 0; i < fast.size(); ++i) {
            INFO("n " << n << (k::decode_one_stream() ? " (one stream)" : "") << " output " << i);
            REQUIRE(std::abs(fast[i] - twin[i]) <= 1e-5f * scale);
          }
        }
      }
    }
    INFO("rows of " << k::to_string(isa) << " no lookup reached");
    REQUIRE(checked.size() == k::kernel_rows(isa).size());
  }
}

TEST_CASE("the batched kernel's activation layout is the same from the scalar and the vector interleave", "[quant][kernels]") {
  if (!test::cpu_runs(k::Isa::Avx512Bf16Vnni)) return;  // only the AVX-512 family interleaves in vectors
  for (std::size_t rows : {1, 3, 9}) {
    const std::size_t cols = 1024 + 96;  // 2 groups of 16 blocks and 3 blocks left over
    const auto x = normal(rows * cols, 8);
    k::QuantizedActivations a, b;
    k::quantize_activations(x.data(), cols, rows, cols, a);
    k::quantize_activations(x.data(), cols, rows, cols, b);
    k::interleave_groups(a, 3);
    k::avx512::interleave_groups_avx512(b, 3);
    REQUIRE(a.groups == 2);
    REQUIRE(b.groups == 2);
    for (std::size_t i = 0; i < rows * a.groups * 512; ++i) REQUIRE(a.q16[i] == b.q16[i]);
    for (std::size_t i = 0; i < rows * a.groups * 16; ++i) {
      REQUIRE(a.d16[i] == b.d16[i]);
      REQUIRE(a.sum16[i] == b.sum16[i]);
    }
  }
}
#endif

TEST_CASE("activations with one scale per 256 share it across a super-block and round as at that scale", "[quant][kernels]") {
  const std::size_t rows = 3, cols = 768 + 96, ldx = cols + 7;  // three super-blocks and three blocks past them
  auto x = normal(rows * ldx, 12);
  x[1 * ldx + 300] = 40.0f;                                  // row 1's second super-block: one large value
  x[2 * ldx + 5] = std::numeric_limits<float>::quiet_NaN();  // row 2's first: a NaN
  for (const float limit : {127.0f, 63.0f}) {
    k::QuantizedActivations a;
    k::quantize_activations_per_256(x.data(), ldx, rows, cols, a, limit);
    REQUIRE(a.blocks == cols / 32);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t b = 0; b < a.blocks; ++b) {
        const std::size_t first = b / 8 * 256, last = std::min(first + 256, cols);
        float amax = 0;
        bool finite = true;
        for (std::size_t c = first; c < last; ++c) {
          finite = finite && std::isfinite(x[r * ldx + c]);
          amax = std::max(amax, std::abs(x[r * ldx + c]));
        }
        INFO("row " << r << " block " << b << " limit " << limit);
        const float d = a.d_row(r)[b];
        if (!finite) {
          REQUIRE(std::isnan(d));
          continue;
        }
        REQUIRE(d == amax / limit);
        std::int32_t sum = 0;
        for (std::size_t j = 0; j < 32; ++j) {
          const float v = x[r * ldx + 32 * b + j];
          const std::int8_t q = a.q_row(r)[32 * b + j];
          REQUIRE(std::abs(static_cast<float>(q)) <= limit);
          REQUIRE(std::abs(static_cast<float>(q) * d - v) <= 0.5001f * d);
          sum += q;
        }
        REQUIRE(a.sum_row(r)[b] == sum);
      }
    // Row 1's large value coarsens its own super-block's scale only.
    REQUIRE(a.d_row(1)[8] == 40.0f / limit);
    REQUIRE(a.d_row(1)[0] < 40.0f / limit / 4);
#ifdef STREAMLLM_HAVE_AVX512_KERNELS
    // The AVX-512 K-quant rows' vector twin (limit 127): the same bytes.
    if (limit == 127.0f && test::cpu_runs(k::Isa::Avx512Bf16Vnni)) {
      k::QuantizedActivations v;
      k::avx512::quantize_activations_per_256_avx512(x.data(), ldx, rows, cols, v);
      for (std::size_t i = 0; i < rows * cols; ++i) REQUIRE(v.q[i] == a.q[i]);
      for (std::size_t i = 0; i < rows * a.blocks; ++i) {
        REQUIRE(v.sum[i] == a.sum[i]);
        REQUIRE((v.d[i] == a.d[i] || (std::isnan(v.d[i]) && std::isnan(a.d[i]))));
      }
    }
#endif
  }
}

TEST_CASE("interleaved Q8_0 / Q4_0 rows hold the same blocks: round trip, dequantised values", "[quant]") {
  for (DType base : {DType::Q8_0, DType::Q4_0})
    for (std::int64_t cols : {64, 512, 1024 + 96, 5632}) {  // no group, one, two and a tail, eleven
      const Matrix m(base, normal(static_cast<std::size_t>(3 * cols), 11, 0.05f), 3, cols);
      const auto bytes = static_cast<std::size_t>(row_bytes(base, cols));
      for (std::int64_t r = 0; r < 3; ++r) {
        INFO(dtype_name(base) << " cols " << cols << " row " << r);
        std::vector<std::byte> inter(bytes), back(bytes);
        quant::interleave_row(base, m.view.row(r), inter.data(), cols);
        quant::deinterleave_row(base, inter.data(), back.data(), cols);
        REQUIRE(std::memcmp(back.data(), m.view.row(r), bytes) == 0);
        if (cols >= 512) REQUIRE(std::memcmp(inter.data(), m.view.row(r), bytes) != 0);  // it did move something
        std::vector<float> want(static_cast<std::size_t>(cols)), got(want.size());
        quant::dequantize_row(base, m.view.row(r), cols, want.data());
        quant::dequantize_row(quant::interleaved_type(base), inter.data(), cols, got.data());
        REQUIRE(got == want);
      }
      // quantize_row to an interleaved type is the base type's blocks, interleaved.
      const Matrix direct(quant::interleaved_type(base), normal(static_cast<std::size_t>(3 * cols), 11, 0.05f), 3, cols);
      std::vector<std::byte> inter(bytes);
      quant::interleave_row(base, m.view.row(0), inter.data(), cols);
      REQUIRE(std::memcmp(direct.view.row(0), inter.data(), bytes) == 0);
    }
}

#ifdef STREAMLLM_HAVE_AVX512_KERNELS
TEST_CASE("the AVX-512 interleave of Q8_0 / Q4_0 rows equals the scalar one", "[quant]") {
  if (!test::cpu_runs(k::Isa::Avx512Bf16Vnni)) return;
  for (DType base : {DType::Q8_0, DType::Q4_0})
    for (std::int64_t cols : {64, 512, 1024 + 96, 5632}) {
      const Matrix m(base, normal(static_cast<std::size_t>(3 * cols), 11, 0.05f), 3, cols);
      const auto bytes = static_cast<std::size_t>(row_bytes(base, cols));
      for (std::int64_t r = 0; r < 3; ++r) {
        INFO(dtype_name(base) << " cols " << cols << " row " << r);
        std::vector<std::byte> inter(bytes), vec(bytes);
        quant::interleave_row(base, m.view.row(r), inter.data(), cols);
        k::avx512::interleave_row_avx512(base, m.view.row(r), vec.data(), static_cast<std::size_t>(cols));
        REQUIRE(vec == inter);
      }
    }
}
#endif

TEMPLATE_TEST_CASE("the int8 kernels of Q8_0 / Q4_0 equal their portable twins, which do the same integer arithmetic",
                   "[quant][kernels]", TEST_FAST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  // Each type in the file's layout and interleaved (the VNNI path's view),
  // the twin always on the file's. AVX2 takes the file's layout: its gemv
  // for both, its int8 tiles for Q4_0 (Q8_0's many tokens go to f32 tiles).
  {
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q8_0x16, DType::Q4_0x16}) {
      if (isa == k::Isa::Avx2 && quant::is_interleaved(t)) continue;
      // 5632 + 32: eleven groups, which the batched kernel takes in slices
      // of k (the later ones adding to the first's sums), and a block past them.
      for (std::int64_t cols : {32, 96, 2048, 1024 + 96, 5632 + 32}) {
        const std::int64_t rows = 9;
        const auto weights = normal(static_cast<std::size_t>(rows * cols), 6, 0.05f);
        const Matrix fast_m(t, weights, rows, cols), m(quant::base_type(t), weights, rows, cols);
        // Every path: one token, the batched gemv (up to its limit), the int8 tiles
        // (beyond, with a short rest on the gemv), with partial tiles of tokens.
        for (std::size_t n : {1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 31, 32, 33, 48, 70, 90}) {
          if (isa == k::Isa::Avx2 && t == DType::Q8_0 && n > k::matmul_kernel(t, isa).decode_tokens) break;
          const auto x = normal(n * static_cast<std::size_t>(cols), 7);
          std::vector<float> fast(n * static_cast<std::size_t>(rows)), twin(fast.size());
          k::matmul(isa == k::Isa::Avx2 ? m.view : fast_m.view, x.data(), n, static_cast<std::size_t>(cols), fast.data(),
                    static_cast<std::size_t>(rows), isa);
          // The twin: int8 activations and per-block integer dot products, in scalar code.
          k::QuantizedActivations xa;
          k::quantize_activations(x.data(), static_cast<std::size_t>(cols), n, static_cast<std::size_t>(cols), xa);
          const k::DecodeRowsFn twin_gemv = m.view.type == DType::Q8_0 ? k::portable::gemv_q8_0 : k::portable::gemv_q4_0;
          twin_gemv(m.view, 0, static_cast<std::size_t>(rows), {x.data(), static_cast<std::size_t>(cols), &xa}, n, twin.data(),
                    static_cast<std::size_t>(rows));
          for (std::size_t i = 0; i < fast.size(); ++i) {
            INFO(dtype_name(t) << " cols " << cols << " n " << n << " isa " << k::to_string(isa) << " output " << i);
            REQUIRE(fast[i] == Approx(twin[i]).epsilon(1e-5).margin(1e-5));
          }
        }
      }
    }
  }
}

namespace {
// A SIMD kernel's outputs against its twin's: the same integer dot products,
// only the order of the float sums differs, so the bound is relative to the
// outputs' size.
void require_twin_sums(const std::vector<float>& fast, const std::vector<float>& twin) {
  float scale = 0;
  for (float v : twin) scale = std::max(scale, std::abs(v));
  REQUIRE(scale > 0);
  for (std::size_t i = 0; i < fast.size(); ++i) {
    INFO("output " << i);
    REQUIRE(std::abs(fast[i] - twin[i]) <= 1e-5f * scale);
  }
}

// Random weights, or (`extreme`) every weight the same: the quants and the
// integer sums at their largest, against activations of 127.
Matrix twin_test_matrix(DType t, std::int64_t rows, std::int64_t cols, bool extreme) {
  const auto size = static_cast<std::size_t>(rows * cols);
  return Matrix(t, extreme ? std::vector<float>(size, 0.05f) : normal(size, 6, 0.05f), rows, cols);
}

// The int8 kernels of w on `isa` against twin_gemv, the portable twin: the
// gemv up to its limit, then the tiles (partial, whole and several groups of
// tokens: 32 per group on AVX-512, 16 on AVX2). Extreme: every activation 1,
// which quantises to 127.
void require_int8_kernels_equal_twin(k::Isa isa, const TensorView& w, bool extreme, k::DecodeRowsFn twin_gemv) {
  const auto rows = static_cast<std::size_t>(w.rows), cols = static_cast<std::size_t>(w.cols);
  {
    // Past the gemv's limit (passes of 4 up to it), a rest after whole
    // groups that goes to the gemv (AVX2: 17, 20; AVX-512: 33, 36; 70 for
    // IQ4_NL, whose gemv takes passes up to 48) and one that the tiles pad
    // (AVX2: 21; AVX-512: 70, and 90 for IQ4_NL).
    REQUIRE(k::matmul_kernel(w.type, isa).decode_tokens < 17);
    for (std::size_t n : {1, 2, 3, 4, 5, 8, 17, 20, 21, 32, 33, 36, 70, 90}) {
      // Counts the f32 tiles take do other arithmetic (the exact-product test holds them).
      const k::MatmulKernel& row = k::matmul_kernel(w.type, isa);
      if (n > row.decode_tokens && row.tiles != k::Tiles::Int8) continue;
      const auto x = extreme ? std::vector<float>(n * cols, 1.0f) : normal(n * cols, 7);
      std::vector<float> fast(n * rows), twin(fast.size()), twin_decoded(fast.size());
      k::matmul(w, x.data(), n, cols, fast.data(), rows, isa);
      // The tokens as the tiles take them, quantised in blocks of 32 at the
      // row's limit (IQ4 on AVX2: 63), and as its decode kernel takes them
      // (row.quantize: Q2_K, Q3_K and Q4_K with one scale per 256, and on
      // AVX-512 IQ4_XS too); tokens from decode_from(n) on go to the decode kernel.
      k::QuantizedActivations xa, xa_decoded;
      k::quantize_activations(x.data(), cols, n, cols, xa, static_cast<float>(row.activation_limit));
      REQUIRE(row.quantize != nullptr);  // an int8 row
      row.quantize(x.data(), cols, n, cols, xa_decoded);
      twin_gemv(w, 0, rows, {x.data(), cols, &xa}, n, twin.data(), rows);
      twin_gemv(w, 0, rows, {x.data(), cols, &xa_decoded}, n, twin_decoded.data(), rows);
      std::copy(twin_decoded.begin() + static_cast<std::ptrdiff_t>(row.decode_from(n) * rows), twin_decoded.end(),
                twin.begin() + static_cast<std::ptrdiff_t>(row.decode_from(n) * rows));
      INFO(dtype_name(w.type) << " cols " << cols << " n " << n << " isa " << k::to_string(isa));
      require_twin_sums(fast, twin);
    }
  }
}
}  // namespace

TEMPLATE_TEST_CASE("the K-quant int8 kernels (gemv and tiles) equal their portable twin, which does the same integer arithmetic",
                   "[quant][kernels]", TEST_FAST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    // k in one slice of the tiles, in two whole ones, and ending in a slice of
    // one super-block; rows leaving partial micro-tiles and row blocks. The
    // last case is the largest integer sums: every weight and activation the
    // same positive value, so every Q4_K / Q5_K quant is its largest (15, 31)
    // and every activation 127, where the AVX2 tiles' int16 runs come
    // closest to overflowing.
    for (std::int64_t cols : {256, 768, 1024, 2048 + 256, -1024}) {
      const bool extreme = cols < 0;
      cols = std::abs(cols);
      const std::int64_t rows = 70;
      const Matrix m = twin_test_matrix(t, rows, cols, extreme);
      require_int8_kernels_equal_twin(TestType::isa, m.view, extreme, k::portable::gemv_kquant_int8);
    }
  }
}

TEMPLATE_TEST_CASE("the int8 kernels of Q4_1, Q5_0 and Q5_1 (gemv and tiles) equal their portable twin", "[quant][kernels]",
                   TEST_FAST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    // Even and odd numbers of pairs and of blocks (the AVX-512 kernel's two
    // pairs a step, its odd pair and its scalar last block), one block; then
    // the largest integer sums: in every block one weight -0.05 and the
    // rest 0.05, so 31 of 32 quants are the largest (15, 31), against
    // activations of 127, where the AVX2 tiles' int16 runs come closest to
    // overflowing.
    for (std::int64_t cols : {2048, 1024 + 96, 1024 + 64, 32, -512, -544}) {
      const bool extreme = cols < 0;
      cols = std::abs(cols);
      const std::int64_t rows = 37;
      std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 6, 0.05f);
      if (extreme)
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = i % 32 == 0 ? -0.05f : 0.05f;
      const Matrix m(t, w, rows, cols);
      require_int8_kernels_equal_twin(TestType::isa, m.view, extreme, k::portable::gemv_unsigned_blocks);
    }
  }
}

TEMPLATE_TEST_CASE("the int8 kernels of Q2_K, Q3_K, IQ4_NL and IQ4_XS (gemv and tiles) equal their portable twins",
                   "[quant][kernels]", TEST_FAST_FAMILIES) {
  if (!test::cpu_runs(TestType::isa)) return;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::IQ4_NL, DType::IQ4_XS}) {
    // Super-blocks: one, a tile slice and a half, past two slices; IQ4_NL
    // also an odd number of blocks and groups of 16 with blocks past them.
    // The extreme case: every weight and activation the same value, so the
    // quants and activations are their largest and the integer sums too.
    const bool blocks32 = t == DType::IQ4_NL;
    const std::vector<std::int64_t> col_counts = blocks32 ? std::vector<std::int64_t>{32, 1024 + 96, 2048 + 32, -1024}
                                                          : std::vector<std::int64_t>{256, 768, 2048 + 256, -1024};
    for (std::int64_t cols : col_counts) {
      const bool extreme = cols < 0;
      cols = std::abs(cols);
      const std::int64_t rows = 37;
      const Matrix m = twin_test_matrix(t, rows, cols, extreme);
      if (t == DType::Q2_K || t == DType::Q3_K)
        require_int8_kernels_equal_twin(TestType::isa, m.view, extreme, k::portable::gemv_low_bit_kquant);
      else
        require_int8_kernels_equal_twin(TestType::isa, m.view, extreme, k::portable::gemv_iq4);
    }
  }
}

TEMPLATE_TEST_CASE("matmul_shared gives each matrix what matmul gives it, fused or not", "[quant][kernels]", TEST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  // wq/wk/wv-like targets (one large, two small, strided outputs) in one
  // type, a mix of int8-tile types (prefill packs the tokens once for all of
  // them: Q4_K_M's wq Q4_K and wv Q6_K), and a mix with F32, which falls back
  // to a matmul per target. 1-17 tokens take the matrix-vector kernels, 33
  // and 48 the tiles or the matrix-vector kernels in passes (AVX-512 Q8_0 /
  // Q4_0), 70 and 90 the tiles (partial token groups, rests on the decode kernels). On every path this CPU can take: on
  // AVX2 the int8 gemv of all four types reads the same activations, so the
  // mixes of those fuse there too; the IQ4 types' activations of 63 fuse
  // only with each other (a mix with Q6_K takes a matmul per target). F16
  // and BF16 on the AVX-512 bf16 tiles (chosen here on any CPU that has
  // them) share one packing of the tokens as the int8 tiles do.
  const std::int64_t cols = 2048;
  const k::ScopedBf16Tiles bf16_tiles(isa == k::Isa::Avx512Bf16Vnni || k::detail::chosen_bf16_tiles().load());
  const std::int64_t rows[] = {300, 40, 40};
  const std::vector<std::vector<DType>> cases = {
      {DType::Q8_0, DType::Q8_0, DType::Q8_0},
      {DType::Q4_0, DType::Q4_0, DType::Q4_0},
      {DType::Q8_0x16, DType::Q8_0x16, DType::Q8_0x16},
      {DType::Q4_K, DType::Q4_K, DType::Q6_K},
      {DType::Q5_K, DType::Q5_K, DType::Q6_K},
      {DType::Q5_0, DType::Q4_K, DType::Q8_0},  // a llama.cpp Q4_K_M of rows not a multiple of 256
      {DType::Q4_1, DType::Q5_1, DType::Q5_0},
      {DType::Q4_0, DType::Q6_K, DType::Q8_0x16},
      {DType::Q4_0, DType::Q4_K, DType::Q8_0},
      {DType::IQ4_XS, DType::IQ4_NL, DType::IQ4_NL},
      {DType::Q2_K, DType::Q3_K, DType::Q4_K},  // a Q2_K file's attention (mins per 16 and per 32 in one packing)
      {DType::IQ4_NL, DType::IQ4_NL, DType::Q6_K},  // on AVX2 quantised alike only among themselves
      {DType::Q4_0, DType::Q8_0, DType::F32},
      {DType::BF16, DType::BF16, DType::BF16},
      {DType::F16, DType::BF16, DType::F16}};
  {
    for (const auto& types : cases) {
      std::vector<Matrix> ms;
      for (std::size_t i = 0; i < 3; ++i)
        ms.emplace_back(types[i], normal(static_cast<std::size_t>(rows[i] * cols), static_cast<std::uint32_t>(20 + i), 0.05f),
                        rows[i], cols);
      for (std::size_t n : {1, 2, 8, 16, 17, 33, 48, 70, 90}) {
        const auto x = normal(n * static_cast<std::size_t>(cols), 9);
        std::vector<std::vector<float>> shared(3), alone(3);
        std::vector<k::MatmulTarget> targets;
        for (std::size_t i = 0; i < 3; ++i) {
          const auto ldy = static_cast<std::size_t>(rows[i]) + 3;
          shared[i].assign(n * ldy, -1.0f);
          alone[i].assign(n * ldy, -1.0f);
          targets.push_back({&ms[i].view, shared[i].data(), ldy});
          k::matmul(ms[i].view, x.data(), n, static_cast<std::size_t>(cols), alone[i].data(), ldy, isa);
        }
        k::matmul_shared(targets, x.data(), n, static_cast<std::size_t>(cols), isa);
        for (std::size_t i = 0; i < 3; ++i) {
          INFO(dtype_name(types[i]) << " target " << i << " n " << n << " isa " << k::to_string(isa));
          REQUIRE(shared[i] == alone[i]);  // the same kernels on the same activations: bit for bit
          const auto ldy = static_cast<std::size_t>(rows[i]) + 3;
          for (std::size_t t = 0; t < n; ++t)  // and nothing written past each token's rows
            for (std::size_t c = static_cast<std::size_t>(rows[i]); c < ldy; ++c) REQUIRE(shared[i][t * ldy + c] == -1.0f);
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("a matrix of many chunks of rows gives each row what that row alone gives, tiles and passes alike",
                   "[quant][kernels]", TEST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  // matmul runs the tiles and the decode kernel's passes chunk by chunk of
  // rows (64 with the tiles), each chunk writing its own columns of y: 150
  // rows are two whole chunks and a part. Each row alone is one chunk. 17
  // and 20 tokens: decode passes of 16 and a rest; 38 and 70: the tiles'
  // whole groups and a rest on the decode kernel (AVX-512 Q8_0x16: 32 + 6).
  const std::int64_t rows = 150, cols = 512;
  {
    for (DType t : {DType::Q8_0, DType::Q8_0x16, DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::IQ4_NL, DType::BF16}) {
      const Matrix m(t, normal(static_cast<std::size_t>(rows * cols), 31, 0.05f), rows, cols);
      for (std::size_t n : {1, 5, 17, 20, 38, 70}) {
        const auto x = normal(n * static_cast<std::size_t>(cols), 32);
        const std::size_t ldy = static_cast<std::size_t>(rows) + 2;
        std::vector<float> all(n * ldy, -1.0f), one(n);
        k::matmul(m.view, x.data(), n, static_cast<std::size_t>(cols), all.data(), ldy, isa);
        for (std::int64_t r = 0; r < rows; ++r) {
          const TensorView row = m.view.row_range(r, r + 1);
          k::matmul(row, x.data(), n, static_cast<std::size_t>(cols), one.data(), 1, isa);
          for (std::size_t j = 0; j < n; ++j) {
            INFO(dtype_name(t) << " isa " << k::to_string(isa) << " n " << n << " row " << r << " token " << j);
            REQUIRE(all[j * ldy + static_cast<std::size_t>(r)] == Approx(one[j]).epsilon(1e-5).margin(1e-6));
          }
        }
        for (std::size_t j = 0; j < n; ++j)  // nothing written past the rows
          for (std::size_t c = static_cast<std::size_t>(rows); c < ldy; ++c) REQUIRE(all[j * ldy + c] == -1.0f);
      }
    }
  }
}

TEST_CASE("quantisers reject values their type cannot hold, and blocks too small for a scale become zeros", "[quant][errors]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : kFileTypes) {
    const std::int64_t cols = traits(t).block_elems == 256 ? 256 : 64;
    std::vector<std::byte> out(static_cast<std::size_t>(row_bytes(t, cols)));
    auto x = normal(static_cast<std::size_t>(cols), 3);
    INFO(dtype_name(t));
    for (float bad : {nan, inf, -inf}) {
      x[37] = bad;
      REQUIRE_THROWS_WITH(quant::quantize_row(t, x.data(), cols, out.data()),
                          Catch::Contains(std::string(dtype_name(t))) && Catch::Contains("column 37 is not finite"));
    }
    x[37] = -1e6f;  // beyond f16, whose range bounds F16 and every block scale
    if (t == DType::F32 || t == DType::BF16)
      REQUIRE_NOTHROW(quant::quantize_row(t, x.data(), cols, out.data()));
    else
      REQUIRE_THROWS_WITH(quant::quantize_row(t, x.data(), cols, out.data()),
                          Catch::Contains("column 37 is beyond the type's range"));
    // Subnormal blocks: 1/scale overflows; they must come back as (near) zeros, not NaN.
    std::vector<float> tiny(static_cast<std::size_t>(cols)), back(tiny.size());
    for (std::size_t i = 0; i < tiny.size(); ++i) tiny[i] = i % 3 == 0 ? 0.0f : (i % 2 ? 1e-39f : -2e-40f);
    quant::quantize_row(t, tiny.data(), cols, out.data());
    quant::dequantize_row(t, out.data(), cols, back.data());
    for (float v : back) REQUIRE(std::abs(v) <= 1e-38f);
  }
}

TEMPLATE_TEST_CASE("NaN and Inf activations come out as NaN or Inf from every kernel path, and leave other tokens alone",
                   "[quant][kernels][errors]", TEST_FAMILIES) {
  const k::Isa isa = TestType::isa;
  if (!test::cpu_runs(isa)) return;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : kFileTypes) {
    const std::int64_t cols = 512, rows = 19;
    const Matrix m(t, normal(static_cast<std::size_t>(rows * cols), 8, 0.05f), rows, cols);
    for (std::size_t n : {1, 2, 5, 17, 40}) {
      const auto clean = normal(n * static_cast<std::size_t>(cols), 9);
      auto x = clean;
      // Token 0 gets a NaN, the last token (when there are several) an Inf;
      // a middle token a subnormal block, which must stay finite.
      x[100] = nan;
      if (n > 1) x[(n - 1) * static_cast<std::size_t>(cols) + 300] = inf;
      if (n > 2)
        for (std::size_t c = 0; c < 32; ++c) x[static_cast<std::size_t>(cols) + 64 + c] = 1e-39f;
      {
        std::vector<float> got(n * static_cast<std::size_t>(rows)), ref(got.size());
        k::matmul(m.view, x.data(), n, static_cast<std::size_t>(cols), got.data(), static_cast<std::size_t>(rows), isa);
        k::matmul(m.view, clean.data(), n, static_cast<std::size_t>(cols), ref.data(), static_cast<std::size_t>(rows), isa);
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
            INFO(dtype_name(t) << " n " << n << " isa " << k::to_string(isa) << " token " << j << " row " << r);
            const float y = got[j * static_cast<std::size_t>(rows) + r];
            if (j == 0 || j == n - 1)
              REQUIRE(!std::isfinite(y));
            else if (j == 1)
              REQUIRE(std::isfinite(y));
            else
              REQUIRE(y == ref[j * static_cast<std::size_t>(rows) + r]);  // untouched tokens: the same numbers
          }
      }
    }
  }
}
