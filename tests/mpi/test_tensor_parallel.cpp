// One model split tensor-parallel over the ranks of an MPI job against the
// float64 goldens and the same model in one process: dense and sink+window
// caches, whole and chunked prefill, quantised files, continuous batching,
// and the failures every rank must report alike.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>

#include "mpi_common.hpp"

using namespace streamllm;
using test::kGoldenTolerance;
using test::kSplitTolerance;
using test::Stories;

namespace {

template <class Config>
std::unique_ptr<KVCacheBase<Config>> cache_for(const test::Golden& g) {
  if (g.mode == "dense") return std::make_unique<KVCache<Config>>();
  return std::make_unique<DynamicSinkWindowKVCache<Config>>(g.sinks, g.window);
}

// Teacher-forces a golden's ids through the split model in chunks of
// `chunk` (all of the prompt first when chunk is 0), beside the one-process
// model; checks the recorded logits, the one-process logits and every
// greedy id past the prompt. Returns the largest difference from the
// one-process logits.
template <class Shard>
float run_golden(Llama<Shard>& split, const test::Golden& g, std::size_t chunk) {
  auto& whole = test::model();
  auto cs = cache_for<Shard>(g);
  auto cw = cache_for<Stories>(g);
  const auto steps = static_cast<std::size_t>(g.steps);
  float worst = 0;
  for (std::size_t p0 = 0; p0 < steps;) {
    const std::size_t n = std::min(chunk == 0 && p0 == 0 ? g.prompt_ids.size() : std::max<std::size_t>(chunk, 1), steps - p0);
    const std::span<const TokenId> ids(g.ids.data() + p0, n);
    const typename Llama<Shard>::Sequence s{cs.get(), ids, true};
    const Llama<Stories>::Sequence w{cw.get(), ids, true};
    const auto got = split.forward({&s, 1});
    const auto want = whole.forward({&w, 1});
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t p = p0 + i;
      INFO(g.name << " chunk " << chunk << " position " << p);
      const float err = test::max_abs_diff(got.row(0, i), want.row(0, i));
      REQUIRE(err <= kSplitTolerance);
      worst = std::max(worst, err);
      if (auto it = g.logits.find(static_cast<int>(p)); it != g.logits.end())
        REQUIRE(test::max_abs_diff(got.row(0, i), it->second) <= kGoldenTolerance);
      if (p + 1 >= g.prompt_ids.size()) REQUIRE(argmax(got.row(0, i)) == g.ids[p + 1]);
    }
    p0 += n;
  }
  REQUIRE(cs->size() == g.steps);
  return worst;
}

}  // namespace

TEST_CASE("a model split over the ranks reproduces every golden, whole-prompt and chunked", "[golden]") {
  test::with_job_ranks([](auto ranks) {
    parallel::TensorParallelModel<Stories, ranks()> tp(test::mpi(), test::model_path("stories260K.bin"));
    if (!tp.leads()) return tp.follow();
    std::vector<test::Golden> all = test::goldens("dense");
    for (auto& g : test::goldens("sink_window")) all.push_back(g);
    for (const auto& g : all)
      for (std::size_t chunk : {std::size_t(0), std::size_t(1), std::size_t(7)}) {
        const float err = run_golden(tp.model(), g, chunk);
        std::cout << ranks() << " ranks, golden " << g.name << " (chunks of " << chunk << "): max |logit - one process| " << err
                  << "\n";
      }
  });
}

TEST_CASE("the classifier on rank 0 alone and a bf16 all-reduce stay within their bound", "[golden]") {
  // Teacher-forced over the dense goldens beside the one-process model. bf16
  // keeps 8 bits of each rank's part of every sum, and the error grows along
  // a long context: up to 0.10 here over 511 positions (logits of about
  // +-10), bounded at 0.25; the greedy id is the golden one wherever its
  // margin is above twice that.
  constexpr float kBf16Bound = 0.25f;
  test::with_job_ranks([&](auto ranks) {
    parallel::TensorParallelOptions opt;
    opt.classifier = ClassifierSplit::OnFirstRank;
    opt.all_reduce = parallel::AllReducePrecision::BF16;
    parallel::TensorParallelModel<Stories, ranks()> tp(test::mpi(), test::model_path("stories260K.bin"), opt);
    if (!tp.leads()) return tp.follow();
    for (const auto& g : test::goldens("dense")) {
      KVCache<TensorShard<Stories, ranks()>> cs;
      KVCache<Stories> cw;
      const std::size_t P = g.prompt_ids.size();
      float worst = 0;
      auto got = tp.model().prefill(std::span<const TokenId>(g.prompt_ids), cs);
      auto want = test::model().prefill(std::span<const TokenId>(g.prompt_ids), cw);
      for (std::size_t p = P; p < static_cast<std::size_t>(g.steps); ++p) {
        INFO(g.name << " position " << p);
        worst = std::max(worst, test::max_abs_diff(got, want));
        REQUIRE(worst <= kBf16Bound);
        if (g.margins[p - P] > 2 * kBf16Bound) REQUIRE(argmax(got) == g.ids[p]);
        got = tp.model().decode(g.ids[p], cs);
        want = test::model().decode(g.ids[p], cw);
      }
      std::cout << ranks() << " ranks, classifier on rank 0, bf16 all-reduce, golden " << g.name << ": max |logit - one process| "
                << worst << "\n";
    }
  });
}

namespace {
// Rows of 512 (a rank's wo columns: 256, one Q4_K block) and a hidden size of
// 1280 (five Q4_K blocks: 768 and 512 per rank, an uneven split).
using Wide = LlamaConfig<512, 1280, 2, 8, 4, 512, 64>;

// Rank 0's string, on every rank.
std::string from_rank0(std::string s) {
  auto n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, test::mpi().comm());
  s.resize(static_cast<std::size_t>(n));
  MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, test::mpi().comm());
  return s;
}

// Random weights of the Wide shape in a GGUF file of `type`, written by rank
// 0 into its scratch folder (the ranks share this machine's file system).
std::string wide_model(const std::string& type) {
  const auto bin = (test::scratch() / "wide.bin").string(), path = (test::scratch() / ("wide-" + type + ".gguf")).string();
  if (test::mpi().rank() == 0) {
    const ModelShape s = Wide::shape();
    std::vector<float> w(static_cast<std::size_t>(loaders::llama2c_float_count(s, true).value()));
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (float& x : w) x = normal(gen);
    loaders::write_llama2c(bin, s, true, w);
    loaders::convert_llama2c_to_gguf(bin, test::model_path("tok512.model"), path, loaders::parse_recipe(type));
  }
  return from_rank0(path);
}

// How many pages of the mapping of `path` that the shard `w` reads from
// hold neither the file's header nor a byte the shard reads (Linux:
// /proc/self/pagemap's "present" bit; 0 elsewhere). No REQUIRE here: the
// other rank must go on in step, so a page it cannot read counts as stray.
template <class Config>
std::size_t stray_file_pages(const std::string& path, const ModelWeights<Config>& w) {
  std::size_t stray = 0;
#if defined(__linux__)
  const std::uint64_t header = formats::GgufFile(path).data_offset();
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto ranges = detail::read_ranges(w);
  const auto read = [&](std::uintptr_t p) {
    for (const auto& [b, e] : ranges)
      if (reinterpret_cast<std::uintptr_t>(b) < p + page && reinterpret_cast<std::uintptr_t>(e) > p) return true;
    return false;
  };
  const auto table = reinterpret_cast<std::uintptr_t>(w.token_embedding.data);  // in the shard's mapping
  const std::string file = std::filesystem::canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return std::numeric_limits<std::size_t>::max();
  for (std::string line; std::getline(maps, line);) {
    if (!line.ends_with(" " + file)) continue;
    unsigned long lo = 0, hi = 0, offset = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %*s %lx", &lo, &hi, &offset) != 3 || table < lo || table >= hi) continue;
    for (std::uintptr_t p = lo; p < hi; p += page) {
      std::uint64_t entry = 0;
      const bool known = ::pread(pagemap, &entry, sizeof entry, static_cast<off_t>(p / page * sizeof entry)) == sizeof entry;
      const bool present = !known || (entry >> 63) != 0;
      if (present && offset + (p - lo) >= header && !read(p)) ++stray;
    }
  }
  ::close(pagemap);
#else
  (void)path;
  (void)w;
#endif
  return stray;
}
}  // namespace

TEST_CASE("quantised files split over two ranks compute what one process computes", "[quant]") {
  if (test::mpi().size() != 2) return;
  for (const std::string type : {"q8_0", "q4_0", "q4_k"}) {
    const std::string path = wide_model(type);
    // Another mapping of the whole file, every page read, as the other
    // rank's would be where slices meet: the kernel's page-out skips a page
    // that another mapping holds too.
    const auto other = formats::map_file(path);
    volatile unsigned char sum = 0;
    for (std::size_t at = 0; at < other->size(); at += 512)
      sum = static_cast<unsigned char>(sum + std::to_integer<unsigned char>(other->data()[at]));
    parallel::TensorParallelModel<Wide, 2> tp(test::mpi(), path);
    // A rank's memory is its shard: of the file, it maps only the pages its
    // slices are on (a fault maps the cached file around it, so the pages
    // next to a slice have to be let go as well).
    CHECK(stray_file_pages(path, tp.weights()) == 0);
    if (!tp.leads()) {
      tp.follow();
      continue;
    }
    auto whole = load_llama<Wide>(path);
    REQUIRE(tp.model().weights().layers[0].wo.cols == 256);
    REQUIRE(tp.model().weights().layers[0].w_gate.rows == (type == "q4_k" ? 768 : 640));
    std::vector<TokenId> ids(48);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>((37 * i + 11) % Wide::Vocab);
    KVCache<TensorShard<Wide, 2>> cs;
    KVCache<Wide> cw;
    float worst = 0, scale = 0;
    auto compare = [&](std::span<const float> got, std::span<const float> want) {
      for (float x : want) scale = std::max(scale, std::abs(x));
      worst = std::max(worst, test::max_abs_diff(got, want));
    };
    compare(tp.model().prefill(std::span<const TokenId>(ids).first(40), cs),
            whole.prefill(std::span<const TokenId>(ids).first(40), cw));
    for (std::size_t i = 40; i < ids.size(); ++i) compare(tp.model().decode(ids[i], cs), whole.decode(ids[i], cw));
    INFO(type << ": largest |logit| " << scale);
    // CHECK, not REQUIRE: the other rank goes on to the next type, and so must this one.
    CHECK(worst <= std::max(kSplitTolerance, test::kSplitInt8Tolerance * scale));
    std::cout << "2 ranks, " << type << " (" << dtype_name(tp.model().weights().layers[0].wo.type)
              << " wo): max |logit - one process| " << worst << " (logits up to " << scale << ")\n";
  }
}

TEST_CASE("continuous batching on a split model: eight prompts joining at different steps, one cancelled", "[scheduler]") {
  test::with_job_ranks([](auto ranks) {
    using Shard = TensorShard<Stories, ranks()>;
    parallel::TensorParallelModel<Stories, ranks()> tp(test::mpi(), test::model_path("stories260K.bin"));
    if (!tp.leads()) return tp.follow();
    std::vector<test::Golden> all = test::goldens("dense");
    for (auto& g : test::goldens("sink_window")) all.push_back(g);
    REQUIRE(all.size() >= 8);
    const std::size_t cancelled = 2;
    BatchScheduler<Shard> sched(tp.model(), test::tok(), {8, 8, 24, {}});  // a small step budget: prompts go in chunks
    std::vector<std::optional<GenerationResult>> done(all.size());
    std::vector<SequenceId> ids(all.size());
    std::size_t submitted = 0;
    for (int step = 0; submitted < all.size() || sched.active() > 0 || sched.waiting() > 0; ++step) {
      if (submitted < all.size() && step == static_cast<int>(submitted) * 9) {  // one joins every 9 steps
        const auto& g = all[submitted];
        typename BatchScheduler<Shard>::Request r;
        r.prompt = g.prompt_ids;
        r.cache = cache_for<Shard>(g);
        r.options.max_new_tokens = g.steps + 1 - static_cast<int>(g.prompt_ids.size());
        r.options.stop_at_eos = false;
        r.on_done = [&done, i = submitted](const GenerationResult& c) { done[i] = c; };
        ids[submitted] = sched.submit(std::move(r));
        ++submitted;
      }
      if (step == 30) sched.cancel(ids[cancelled]);
      sched.step();
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO(all[i].name);
      REQUIRE(done[i].has_value());
      const std::vector<TokenId> golden(all[i].ids.begin() + static_cast<std::ptrdiff_t>(all[i].prompt_ids.size()),
                                        all[i].ids.end());
      if (i == cancelled) {
        REQUIRE(done[i]->stop == StopReason::Cancelled);
        REQUIRE(done[i]->tokens ==
                std::vector<TokenId>(golden.begin(), golden.begin() + static_cast<std::ptrdiff_t>(done[i]->tokens.size())));
        continue;
      }
      REQUIRE(done[i]->tokens == golden);
      REQUIRE(done[i]->stop == StopReason::MaxTokens);
    }
  });
}

TEST_CASE("a rank that cannot load makes every rank fail with the same message", "[ranks]") {
  const int size = test::mpi().size();
  if (size != 2 && size != 4) return;
  // A file missing on rank 1 alone.
  const std::string path = test::mpi().rank() == 1 ? "/nonexistent/stories260K.bin" : test::model_path("stories260K.bin");
  auto load = [&](auto ranks) { parallel::TensorParallelModel<Stories, ranks()> tp(test::mpi(), path); };
  REQUIRE_THROWS_WITH(test::with_job_ranks(load), Catch::StartsWith("rank 1 of " + std::to_string(size) + ": ") &&
                                                      Catch::Contains("/nonexistent/stories260K.bin"));
  // A file whose shape is not the template's, on every rank: rank 0's message.
  const std::string wide = wide_model("q8_0");
  auto wrong_shape = [&](auto ranks) { parallel::TensorParallelModel<Stories, ranks()> tp(test::mpi(), wide); };
  REQUIRE_THROWS_WITH(test::with_job_ranks(wrong_shape),
                      Catch::StartsWith("rank 0 of ") && Catch::Contains("shape does not match the template"));
}

TEST_CASE("a job whose size does not divide the KV heads is refused on every rank", "[ranks]") {
  if (test::mpi().size() == 2 || test::mpi().size() == 4) return;
  REQUIRE_THROWS_WITH(parallel::check_ranks(test::mpi().size(), Stories::KVHeads),
                      Catch::Contains(std::to_string(test::mpi().size()) + " ranks do not divide the model's 4 KV heads"));
  // A model split in two is refused by a job of another size, on every rank.
  REQUIRE_THROWS_WITH((parallel::TensorParallelModel<Stories, 2>(test::mpi(), test::model_path("stories260K.bin"))),
                      Catch::Contains("split 2 ways, the job has " + std::to_string(test::mpi().size()) + " processes"));
}

TEST_CASE("a shard without its link to the other ranks refuses to run", "[ranks]") {
  // A copy of a shard's weights in a Llama of its own would sum only its part.
  Llama<TensorShard<Stories, 2>> alone(shard_weights<Stories, 2>(
      load_weights<Stories>(test::model_path("stories260K.bin"), LoadMode::Mapped, WeightLayout::AsInFile), 0));
  KVCache<TensorShard<Stories, 2>> cache;
  REQUIRE_THROWS_WITH(alone.decode(1, cache), Catch::Contains("no link to the others"));
  REQUIRE(cache.size() == 0);
}

TEST_CASE("the all-reduce sums a message longer than one MPI call exactly, in f32 and in bf16", "[ranks]") {
  // A prefill of many rows is summed in several calls (mpi_link.hpp): every
  // element must still be the sum over the ranks, the tail included.
  const int size = test::mpi().size(), rank = test::mpi().rank();
  if (size != 2 && size != 4) return;
  const std::size_t n = 3 * (std::size_t(1) << 18) + 5;  // three calls of f32 and a tail
  for (auto precision : {parallel::AllReducePrecision::F32, parallel::AllReducePrecision::BF16}) {
    INFO("bf16: " << (precision == parallel::AllReducePrecision::BF16));
    parallel::MpiShardLink<TensorShard<Stories, 2>> link(test::mpi().comm(), std::vector<SliceBounds>(std::size_t(size)),
                                                         precision);
    // Small integers: exact in bf16 too, and so are their sums (< 256).
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 16));
    link.sum(x.data(), n);
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += x[i] != ranks_sum * static_cast<float>(i % 16);
    REQUIRE(wrong == 0);
    REQUIRE(link.stats().all_reduce_bytes == n * (precision == parallel::AllReducePrecision::F32 ? 4 : 2));
    REQUIRE(link.stats().all_reduce_calls > 1);
    // Rank 0's link stops the others when it goes: they wait for that.
    if (rank != 0) {
      Llama<TensorShard<Stories, 2>> idle(shard_weights<Stories, 2>(
          load_weights<Stories>(test::model_path("stories260K.bin"), LoadMode::Mapped, WeightLayout::AsInFile), 0));
      link.follow(idle);
    }
  }
}
