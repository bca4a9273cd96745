// The ggml numerics (--numerics ggml-*, backend/cpu/ggml) against llama.cpp's own greedy runs
// (tests/data/reference, reference_data.h), for each default model and each build of llama.cpp
// recorded there (AVX-512 and AVX2, which differ in their arithmetic): every one of the 64
// greedy tokens of all 20 prompts must be llama.cpp's, and every logit of llama.cpp's top 10 at
// every step must be its value as recorded (to 4 decimals). The run is llama.cpp's: each prompt
// alone in a fresh sequence, prefilled in one forward, then one token per forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/ggml/ggml_backend.h"
#include "batching/reference_data.h"
#include "common/test_models.h"
#include "gguf/file.h"
#include "runtime/executor.h"

namespace cellm {
namespace {

// The reference keeps logits rounded to 4 decimals: within half a unit of the last decimal,
// plus the float rounding of a logit near 20.
constexpr float kRecordedPrecision = 0.5e-4f + 4e-6f;

struct ParityCase {
  const char* model;  // tests/data/reference/<model>-<build>.json
  const char* file;
  const char* build;
};

cpu::ggml::Build build_of(const std::string& name) { return cpu::ggml::parse_build("ggml-" + name); }

class GgmlParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(GgmlParity, GreedyTokensAndLogitsAreLlamaCpps) {
  const ParityCase& c = GetParam();
  CELLM_REQUIRE_MODEL(path, c.file);
  const test::Reference ref = test::load_reference(c.model, c.build);
  ASSERT_EQ(ref.prompts.size(), 20u);
  // The file must come from the build it is named after.
  const bool avx512_build = ref.system_info.find("AVX512 = 1") != std::string::npos;
  ASSERT_EQ(avx512_build, std::string(c.build) == "avx512") << ref.system_info;

  const auto file = gguf::File::open(path);
  cpu::ggml::GgmlCpuBackend backend(2, build_of(c.build));
  runtime::ExecutorOptions options;
  options.max_decode_batch = 1;
  runtime::Executor executor(backend, *file, options);
  const size_t vocab = static_cast<size_t>(executor.vocab_size());

  int identical = 0;
  float max_diff = 0;
  for (size_t p = 0; p < ref.prompts.size(); ++p) {
    const test::ReferencePrompt& prompt = ref.prompts[p];
    const kv::SeqId seq = executor.cache().create();
    std::vector<int32_t> tokens = prompt.prompt_ids, positions(tokens.size());
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<kv::SeqId> seqs(tokens.size(), seq);
    std::vector<int32_t> last = {static_cast<int32_t>(tokens.size() - 1)};
    int differing = 0;
    float prompt_diff = 0;
    for (size_t step = 0; step < prompt.tokens.size(); ++step) {
      const std::span<const float> logits = executor.run({tokens, positions, seqs, last}).logits.first(vocab);
      for (size_t k = 0; k < prompt.top_ids[step].size(); ++k)
        prompt_diff = std::max(prompt_diff, std::fabs(logits[prompt.top_ids[step][k]] - prompt.top_logits[step][k]));
      const auto chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (chosen != prompt.tokens[step]) {
        ++differing;
        ADD_FAILURE() << c.model << " (" << c.build << ") prompt " << p << " step " << step << ": llama.cpp "
                      << prompt.tokens[step] << ", cellm " << chosen;
      }
      // The next forward: llama.cpp's token (cellm's, while they agree), one row.
      const int32_t position = static_cast<int32_t>(prompt.prompt_ids.size() + step);
      tokens = {prompt.tokens[step]}, positions = {position}, seqs = {seq}, last = {0};
    }
    executor.cache().remove(seq);
    identical += differing == 0;
    max_diff = std::max(max_diff, prompt_diff);
  }
  std::printf("[ggml parity] %s, llama.cpp's %s build: %d/%zu prompts with all 64 greedy tokens identical, "
              "max|logit diff| %.6f over its top-10 at every step (recorded to 4 decimals)\n",
              c.model, c.build, identical, ref.prompts.size(), max_diff);
  EXPECT_LE(max_diff, kRecordedPrecision) << c.model << " (" << c.build << ")";
}

INSTANTIATE_TEST_SUITE_P(DefaultModels, GgmlParity,
                         ::testing::Values(ParityCase{"smollm2", test::kSmolLM2, "avx512"},
                                           ParityCase{"smollm2", test::kSmolLM2, "avx2"},
                                           ParityCase{"gemma3", test::kGemma3, "avx512"},
                                           ParityCase{"gemma3", test::kGemma3, "avx2"}),
                         [](const auto& parity_case) { return std::string(parity_case.param.model) + "_" + parity_case.param.build; });

}  // namespace
}  // namespace cellm
