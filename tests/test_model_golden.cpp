// The forward pass against an independent float64 reference on real weights
// (stories260K), and batched prefill against token-by-token decoding.
#include <unistd.h>

#include <iostream>

#include "common.hpp"

using namespace streamllm;
using test::kGoldenTolerance;
using test::model;
using test::Stories;

namespace {

// Batched prefill and one-token decode differ only in summation order.
constexpr float kPrefillVsDecodeTolerance = 1e-4f;

// Feeds ids[from..steps) one token at a time after the cache already holds
// ids[0..from); checks recorded logits and, past the prompt, that each argmax
// is the golden next id. Returns the largest logit error seen.
float decode_and_check(const test::Golden& g, KVCache<Stories>& cache, std::size_t from, float max_err) {
  for (std::size_t p = from; p < static_cast<std::size_t>(g.steps); ++p) {
    const auto logits = model().decode(g.ids[p], cache);
    INFO(g.name << " position " << p);
    if (auto it = g.logits.find(static_cast<int>(p)); it != g.logits.end()) {
      const float err = test::max_abs_diff(logits, it->second);
      REQUIRE(err <= kGoldenTolerance);
      max_err = std::max(max_err, err);
    }
    if (p + 1 >= g.prompt_ids.size()) REQUIRE(argmax(logits) == g.ids[p + 1]);
  }
  return max_err;
}

}  // namespace

TEST_CASE("dense goldens: prefill of the prompt, then decoding, reproduce logits and greedy ids", "[golden][model]") {
  for (const auto& g : test::goldens("dense")) {
    KVCache<Stories> cache;
    const std::size_t P = g.prompt_ids.size();
    const Llama<Stories>::Sequence seq{&cache, g.prompt_ids, true};
    const auto out = model().forward({&seq, 1});
    REQUIRE(out.rows(0) == P);
    float max_err = 0;
    for (std::size_t p = 0; p < P; ++p) {
      if (auto it = g.logits.find(static_cast<int>(p)); it != g.logits.end()) {
        INFO(g.name << " prompt position " << p);
        const float err = test::max_abs_diff(out.row(0, p), it->second);
        REQUIRE(err <= kGoldenTolerance);
        max_err = std::max(max_err, err);
      }
    }
    REQUIRE(argmax(out.last(0)) == g.ids[P]);
    max_err = decode_and_check(g, cache, P, max_err);
    std::cout << "golden " << g.name << " (prefill " << P << " + decode): max |logit error| " << max_err << "\n";
  }
}

TEST_CASE("dense goldens: token-by-token decoding from position 0 reproduces logits and greedy ids", "[golden][model]") {
  for (const auto& g : test::goldens("dense")) {
    KVCache<Stories> cache;
    const float max_err = decode_and_check(g, cache, 0, 0.0f);
    std::cout << "golden " << g.name << " (decode only): max |logit error| " << max_err << "\n";
  }
}

TEST_CASE("prefill in one batch gives the logits of token-by-token decoding", "[model]") {
  for (const auto& g : test::goldens("dense")) {
    const std::span<const TokenId> ids(g.ids.data(), static_cast<std::size_t>(g.steps));
    KVCache<Stories> batched, stepwise;
    const Llama<Stories>::Sequence seq{&batched, ids, true};
    const auto all = model().forward({&seq, 1});
    std::vector<float> batch_logits(all.row(0, 0).data(), all.row(0, 0).data() + ids.size() * Stories::Vocab);
    float worst = 0;
    for (std::size_t p = 0; p < ids.size(); ++p) {
      const auto one = model().decode(ids[p], stepwise);
      const float err = test::max_abs_diff(one, {batch_logits.data() + p * Stories::Vocab, Stories::Vocab});
      INFO(g.name << " position " << p);
      REQUIRE(err <= kPrefillVsDecodeTolerance);
      worst = std::max(worst, err);
    }
    REQUIRE(batched.size() == stepwise.size());
    std::cout << "prefill vs decode " << g.name << " (" << ids.size() << " tokens): max |diff| " << worst << "\n";
  }
}

TEST_CASE("prefill cut into chunks gives the logits of one batch", "[model]") {
  const auto g = test::goldens("dense").front();
  const std::span<const TokenId> ids(g.ids.data(), 100);
  KVCache<Stories> whole, chunked;
  const auto want_span = model().prefill(ids, whole);
  const std::vector<float> want(want_span.begin(), want_span.end());
  for (std::size_t chunk : {1, 7, 33, 99}) {
    chunked.clear();
    model().set_max_chunk(chunk);
    const auto got = model().prefill(ids, chunked);
    INFO("chunk " << chunk);
    REQUIRE(test::max_abs_diff(got, want) <= kPrefillVsDecodeTolerance);
    REQUIRE(chunked.size() == 100);
  }
  model().set_max_chunk(512);
}

TEST_CASE("a checkpoint with a separate classifier (negative vocab) loads and is used", "[model][llama2c]") {
  // stories260K shares its classifier with the embedding; write the same
  // weights with an explicit classifier, once equal and once negated.
  const formats::MappedFile f(test::model_path("stories260K.bin"));
  const ModelShape s = Stories::shape();
  const auto n = static_cast<std::size_t>(loaders::llama2c_float_count(s, true).value());
  const float* w = reinterpret_cast<const float*>(f.data() + loaders::kLlama2cHeaderBytes);
  std::vector<float> floats(w, w + n);
  floats.insert(floats.end(), w, w + static_cast<std::size_t>(s.vocab * s.dim));  // classifier = embedding
  const auto dir = std::filesystem::temp_directory_path();
  const auto same = (dir / ("streamllm-cls-same-" + std::to_string(::getpid()) + ".bin")).string();
  loaders::write_llama2c(same, s, false, floats);
  for (std::size_t i = n; i < floats.size(); ++i) floats[i] = -floats[i];
  const auto negated = (dir / ("streamllm-cls-neg-" + std::to_string(::getpid()) + ".bin")).string();
  loaders::write_llama2c(negated, s, false, floats);

  const std::vector<TokenId> prompt{1, 403, 407, 261, 378};
  KVCache<Stories> c0, c1, c2;
  const auto want = model().prefill(prompt, c0);
  const std::vector<float> base(want.begin(), want.end());
  auto m_same = load_llama<Stories>(same);
  auto m_neg = load_llama<Stories>(negated);
  REQUIRE(m_same.weights().classifier.data != m_same.weights().token_embedding.data);
  const auto got_same = m_same.prefill(prompt, c1);
  REQUIRE(test::max_abs_diff(got_same, base) == 0.0f);
  const auto got_neg = m_neg.prefill(prompt, c2);
  for (std::size_t i = 0; i < base.size(); ++i) REQUIRE(got_neg[i] == -base[i]);
  std::filesystem::remove(same);
  std::filesystem::remove(negated);
}

TEST_CASE("one forward over several sequences equals running each alone", "[model][batch]") {
  const auto gs = test::goldens("dense");
  // Three sequences at different depths, with different numbers of new tokens.
  KVCache<Stories> solo[3], batched[3];
  const std::size_t depth[3] = {0, 7, 30}, fresh[3] = {5, 1, 12};
  std::vector<std::vector<float>> want(3);
  for (int s = 0; s < 3; ++s) {
    const auto& ids = gs[static_cast<std::size_t>(s) % gs.size()].ids;
    if (depth[s] > 0) {
      model().prefill({ids.data(), depth[s]}, solo[s]);
      model().prefill({ids.data(), depth[s]}, batched[s]);
    }
    const auto l = model().prefill({ids.data() + depth[s], fresh[s]}, solo[s]);
    want[static_cast<std::size_t>(s)].assign(l.begin(), l.end());
  }
  std::vector<Llama<Stories>::Sequence> seqs;
  for (int s = 0; s < 3; ++s) {
    const auto& ids = gs[static_cast<std::size_t>(s) % gs.size()].ids;
    seqs.push_back({&batched[s], {ids.data() + depth[s], fresh[s]}, false});
  }
  const auto out = model().forward(seqs);
  for (std::size_t s = 0; s < 3; ++s) {
    INFO("sequence " << s);
    REQUIRE(test::max_abs_diff(out.last(s), want[s]) <= kPrefillVsDecodeTolerance);
    REQUIRE(batched[s].size() == solo[s].size());
  }
  seqs[1].cache = seqs[0].cache;
  REQUIRE_THROWS_WITH(model().forward(seqs), Catch::Contains("share one cache"));
}
