// Bad input gets a streamllm::Error naming the file (or the argument) and the
// problem; nothing crashes, and a rejected call changes no state.
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common.hpp"
#include "streamllm/loaders/convert.hpp"

using namespace streamllm;
using test::scratch;
using test::Stories;

namespace {

// A scratch folder of this process, for the files these tests corrupt.
std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string write_file(const std::string& name, const std::vector<char>& bytes) {
  const auto path = (scratch() / name).string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// stories260K.bin with header field `index` (0 = dim ... 6 = seq_len) replaced.
std::string with_header_field(const std::string& name, int index, std::int32_t value) {
  auto bytes = read_all(test::model_path("stories260K.bin"));
  std::memcpy(bytes.data() + 4 * index, &value, 4);
  return write_file(name, bytes);
}

template <class Config = Stories>
std::string load_error(const std::string& path) {
  try {
    load_llama<Config>(path);
  } catch (const FileError& e) {
    return e.what();
  }
  FAIL("loading '" << path << "' did not throw streamllm::FileError");
  return {};
}

}  // namespace

TEST_CASE("a missing model file is an error naming the file", "[errors]") {
  const std::string path = (scratch() / "no-such-model.bin").string();
  const auto msg = load_error(path);
  REQUIRE_THAT(msg, Catch::Contains(path) && Catch::Contains("cannot open") && Catch::Contains("No such file"));
}

TEST_CASE("an empty model file is an error", "[errors]") {
  const auto path = write_file("empty.bin", {});
  REQUIRE_THAT(load_error(path), Catch::Contains(path) && Catch::Contains("empty"));
}

TEST_CASE("a truncated model file is an error that says how much is missing", "[errors]") {
  auto bytes = read_all(test::model_path("stories260K.bin"));
  const auto full = bytes.size();
  bytes.resize(full - 1000);
  const auto path = write_file("truncated.bin", bytes);
  REQUIRE_THAT(load_error(path), Catch::Contains(path) && Catch::Contains("truncated") && Catch::Contains(std::to_string(full)) &&
                                     Catch::Contains(std::to_string(full - 1000)));
  bytes.resize(10);  // not even a header
  const auto tiny = write_file("tiny.bin", bytes);
  REQUIRE_THAT(load_error(tiny), Catch::Contains("truncated") && Catch::Contains("header"));
}

TEST_CASE("trailing bytes after the weights are an error", "[errors]") {
  auto bytes = read_all(test::model_path("stories260K.bin"));
  bytes.resize(bytes.size() + 12, 0);
  const auto path = write_file("trailing.bin", bytes);
  REQUIRE_THAT(load_error(path), Catch::Contains("12 bytes more"));
}

TEST_CASE("a header that does not match the template names each differing dimension", "[errors]") {
  const auto path = test::model_path("stories260K.bin");
  const auto msg = load_error<presets::Stories15M>(path);
  REQUIRE_THAT(msg, Catch::Contains(path) && Catch::Contains("does not match the template") &&
                        Catch::Contains("dim is 64 in the file but 288 in the template") &&
                        Catch::Contains("kv_heads is 4 in the file but 6 in the template"));
  // One dimension off: the seq_len the file was trained with.
  const auto seq = with_header_field("seq256.bin", 6, 256);
  REQUIRE_THAT(load_error(seq), Catch::Contains("max_seq is 256 in the file but 512 in the template"));
}

TEST_CASE("negative or zero dimensions in a header are errors", "[errors]") {
  const char* names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int field = 0; field < 7; ++field) {
    for (std::int32_t value : {0, -8}) {
      if (field == 5 && value < 0) continue;  // negative vocab means "separate classifier"
      const auto path = with_header_field("dims.bin", field, value);
      INFO("field " << names[field] << " = " << value);
      REQUIRE_THAT(load_error(path),
                   Catch::Contains(path) && Catch::Contains(names[field]) && Catch::Contains(std::to_string(value)));
    }
  }
}

TEST_CASE("a crafted llama2.c header whose sizes overflow is refused, not read past the file's end", "[errors]") {
  // Each field is a plausible int32; their products wrap int64 to a size the
  // file seems to have (the first would make the converter read past the
  // end of a 4,028-byte file, the second ask for an impossible allocation).
  struct Crafted {
    std::int32_t header[7];
    std::size_t file_bytes;
  };
  const Crafted cases[] = {{{16384, 1431644841, 131072, 16384, 1, 512, 2139079656}, 4028},
                           {{1 << 30, 715827712, 1, 1, 1, 512, 2147483645}, 28}};
  for (const Crafted& c : cases) {
    std::vector<char> bytes(c.file_bytes, 0);
    std::memcpy(bytes.data(), c.header, sizeof c.header);
    const auto path = write_file("crafted.bin", bytes);
    INFO("dim " << c.header[0] << ", hidden_dim " << c.header[1] << ", " << c.file_bytes << " bytes");
    REQUIRE_THROWS_AS(loaders::llama2c_tensors(*formats::map_file(path)), FileError);
    REQUIRE_THROWS_WITH(loaders::llama2c_tensors(*formats::map_file(path)),
                        Catch::Contains(path) && Catch::Contains("impossible") && Catch::Contains("2^63 bytes"));
    REQUIRE_THROWS_AS(loaders::convert_llama2c_to_gguf(path, test::model_path("tok512.model"),
                                                       (scratch() / "crafted.gguf").string(), loaders::ConvertRecipe::F32),
                      FileError);
  }
}

TEST_CASE("token ids out of range are rejected before any state changes", "[errors]") {
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  KVCache<Stories> cache;
  model.decode(1, cache);
  REQUIRE_THROWS_WITH(model.decode(512, cache), Catch::Contains("token id 512") && Catch::Contains("[0, 512)"));
  REQUIRE_THROWS_AS(model.decode(-3, cache), InputError);
  const std::vector<TokenId> prompt{1, 20, 999, 30};
  REQUIRE_THROWS_WITH(model.prefill(prompt, cache), Catch::Contains("token id 999 at index 2"));
  REQUIRE(cache.size() == 1);
}

TEST_CASE("a Llama is one thread's at a time, and threads with their own over the same weights run alongside",
          "[errors][threads]") {
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  std::vector<TokenId> prompt(200);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(1 + (i * 37) % 500);

  // Alone, then two threads each on a Llama of its own sharing the weights:
  // the same logits, bit for bit (each row's sums run in the same order).
  KVCache<Stories> solo_cache;
  const auto solo = model.prefill(prompt, solo_cache);
  const std::vector<float> expected(solo.begin(), solo.end());
  std::vector<float> got[2];
  {
    std::thread threads[2];
    for (int t = 0; t < 2; ++t)
      threads[t] = std::thread([&, t] {
        Llama<Stories> mine(model.weights());
        KVCache<Stories> cache;
        for (int rep = 0; rep < 5; ++rep) {
          cache.clear();
          const auto l = mine.prefill(prompt, cache);
          got[t].assign(l.begin(), l.end());
        }
      });
    for (auto& th : threads) th.join();
  }
  REQUIRE(got[0] == expected);
  REQUIRE(got[1] == expected);

  // Two threads on the one Llama: passes that overlap are refused with an
  // error saying why, instead of racing on its scratch space.
  std::atomic<int> refused = 0;
  std::string message;
  std::mutex message_mu;
  {
    std::thread threads[2];
    for (auto& th : threads)
      th = std::thread([&] {
        KVCache<Stories> cache;
        for (int rep = 0; rep < 400 && refused == 0; ++rep) {
          cache.clear();
          try {
            model.prefill(prompt, cache);
          } catch (const InputError& e) {
            std::lock_guard lock(message_mu);
            message = e.what();
            ++refused;
          }
        }
      });
    for (auto& th : threads) th.join();
  }
  INFO(message);
  REQUIRE(refused > 0);
  REQUIRE_THAT(message, Catch::Contains("another thread") && Catch::Contains("model.weights()"));
  // And the model is whole afterwards.
  KVCache<Stories> after;
  const auto again = model.prefill(prompt, after);
  REQUIRE(std::vector<float>(again.begin(), again.end()) == expected);
}

TEST_CASE("a prompt longer than the dense cache is an error, and the cache is untouched", "[errors]") {
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  KVCache<Stories> cache;
  const std::vector<TokenId> long_prompt(Stories::MaxSeq + 1, 300);
  REQUIRE_THROWS_AS(model.prefill(long_prompt, cache), CacheFullError);
  REQUIRE_THROWS_WITH(model.prefill(long_prompt, cache), Catch::Contains("MaxSeq 512") && Catch::Contains("513 new"));
  REQUIRE(cache.size() == 0);
  const std::vector<TokenId> fits(Stories::MaxSeq, 300);
  model.prefill(fits, cache);
  REQUIRE(cache.size() == Stories::MaxSeq);
  REQUIRE_THROWS_AS(model.decode(5, cache), CacheFullError);
  const std::vector<TokenId> empty;
  REQUIRE_THROWS_WITH(model.prefill(empty, cache), Catch::Contains("empty"));
}

TEST_CASE("a file that is not a SentencePiece model is an error naming it", "[errors][tokenizer]") {
  const auto path = test::model_path("stories260K.bin");
  REQUIRE_THROWS_WITH(Tokenizer(path), Catch::Contains(path) && Catch::Contains("SentencePiece"));
  const auto missing = (scratch() / "none.model").string();
  REQUIRE_THROWS_AS(Tokenizer(missing), FileError);
}

TEST_CASE("a tokenizer whose vocabulary is not the model's is rejected by generate", "[errors]") {
  auto model = load_llama<Stories>(test::model_path("stories260K.bin"));
  const Tokenizer big(test::model_path("tokenizer.model"));
  KVCache<Stories> cache;
  REQUIRE_THROWS_WITH(generate(model, big, cache, "Hi", {}, nullptr), Catch::Contains("32000"));
}

namespace {

// The weights of `source` with one row of the embedding (token `poisoned`)
// made NaN: the sequences that read that token see NaN activations through
// every layer; the others do not.
struct PoisonedEmbedding {
  std::vector<float> table;
  ModelWeights<Stories> weights;
  PoisonedEmbedding(const ModelWeights<Stories>& source, TokenId poisoned) : weights(source) {
    constexpr std::int64_t V = Stories::Vocab, D = Stories::Dim;
    table.resize(static_cast<std::size_t>(V * D));
    for (std::int64_t r = 0; r < V; ++r) kernels::dequantize_row(source.token_embedding, r, table.data() + r * D);
    for (std::int64_t c = 0; c < D; ++c)
      table[static_cast<std::size_t>(poisoned * D + c)] = std::numeric_limits<float>::quiet_NaN();
    weights.token_embedding = TensorView::dense(DType::F32, reinterpret_cast<const std::byte*>(table.data()), V, D);
  }
};

}  // namespace

TEST_CASE("NaN in the weights reaches the logits as NaN, sampling them is an error, other sequences go on", "[errors]") {
  // f32 weights, and Q8_0 ones whose matrices quantise NaN activations to int8.
  const auto q8 = (scratch() / "stories260K-q8_0.gguf").string();
  loaders::convert_llama2c_to_gguf(test::model_path("stories260K.bin"), test::model_path("tok512.model"), q8,
                                   loaders::ConvertRecipe::Q8_0);
  const std::string files[] = {test::model_path("stories260K.bin"), q8};
  for (const auto& file : files) {
    INFO(file);
    const auto source = load_llama<Stories>(file);
    constexpr TokenId kPoison = 300;
    PoisonedEmbedding p(source.weights(), kPoison);
    Llama<Stories> model(p.weights);
    const std::vector<TokenId> healthy = {1, 50, 60, 70}, sick = {1, 50, kPoison, 70};
    KVCache<Stories> a, b;
    const auto good = model.prefill(healthy, a);
    const std::vector<float> good_logits(good.begin(), good.end());
    KVCache<Stories> ref_cache;
    Llama<Stories> clean(source.weights());
    const auto ref = clean.prefill(healthy, ref_cache);
    REQUIRE(good_logits == std::vector<float>(ref.begin(), ref.end()));  // the poison is only in row 300
    const auto bad = model.prefill(sick, b);
    for (float v : bad) REQUIRE(std::isnan(v));
    Sampler sampler;
    REQUIRE_THROWS_WITH(sampler.sample(bad), Catch::Contains("is NaN") && Catch::Contains("weights hold NaN/Inf"));

    // In one batch: the sick sequence ends with the error, the healthy one
    // generates what it generates alone.
    BatchScheduler<Stories> sched(model, test::stories_tokenizer(), {4, 64, 64, {}});
    std::optional<GenerationResult> done_sick, done_healthy;
    for (int i = 0; i < 2; ++i) {
      BatchScheduler<Stories>::Request r;
      r.prompt = i == 0 ? sick : healthy;
      r.cache = std::make_unique<KVCache<Stories>>();
      r.options.max_new_tokens = 12;
      r.options.stop_at_eos = false;
      r.on_done = [&, i](const GenerationResult& c) { (i == 0 ? done_sick : done_healthy) = c; };
      sched.submit(std::move(r));
    }
    sched.run_until_idle();
    REQUIRE(done_sick.has_value());
    REQUIRE_THAT(done_sick->error, Catch::Contains("is NaN"));
    REQUIRE(done_sick->tokens.empty());
    REQUIRE(done_healthy.has_value());
    REQUIRE(done_healthy->error.empty());
    KVCache<Stories> solo;
    std::vector<TokenId> want;
    auto logits = model.prefill(healthy, solo);
    for (int i = 0; i < 12; ++i) {
      want.push_back(argmax(logits));
      if (i < 11) logits = model.decode(want.back(), solo);
    }
    REQUIRE(done_healthy->tokens == want);
  }
}
