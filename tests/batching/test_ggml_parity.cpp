// The ggml numerics (--numerics ggml-*, backend/cpu/ggml) against llama.cpp's own greedy runs
// (tests/data/reference, reference_data.h), for each default model and each build of llama.cpp
// recorded there (AVX-512 and AVX2, which differ in their arithmetic): every one of the 64
// greedy tokens of all 20 prompts must be llama.cpp's, and every logit of llama.cpp's top 10 at
// every step must be its value as recorded (to 4 decimals). The run is llama.cpp's: each prompt
// alone in a fresh sequence, prefilled in one forward, then one token per forward.
// The same for random-weight models in every weight format the ggml numerics multiply
// (tests/data/reference/formats-<build>.json), rebuilt here as `cellm mkmodel` wrote them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/ggml/ggml_backend.h"
#include "model/random_model.h"
#include "batching/reference_data.h"
#include "common/test_models.h"
#include "gguf/file.h"
#include "runtime/executor.h"

namespace cellm {
namespace {

// The reference keeps logits rounded to 4 decimals: a logit of llama.cpp's is within half a unit
// of the last decimal of the recorded one, plus that decimal's rounding to a float here (an ulp
// at the logit's magnitude, 2 for margin). The excess over that bound is what the tests measure.
float excess(float cellm, float recorded) {
  const float a = std::fabs(recorded);
  const float bound = 0.5e-4f + 2 * (std::nextafter(a, INFINITY) - a);
  return std::max(0.0f, std::fabs(cellm - recorded) - bound);
}

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
  // One thread: the results do not depend on it, and CTest runs tests side by side on few cores.
  cpu::ggml::GgmlCpuBackend backend(1, build_of(c.build));
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
    float prompt_diff = 0, prompt_excess = 0;
    for (size_t step = 0; step < prompt.tokens.size(); ++step) {
      const std::span<const float> logits = executor.run({tokens, positions, seqs, last}).logits.first(vocab);
      for (size_t k = 0; k < prompt.top_ids[step].size(); ++k) {
        const float got = logits[prompt.top_ids[step][k]], recorded = prompt.top_logits[step][k];
        prompt_diff = std::max(prompt_diff, std::fabs(got - recorded));
        prompt_excess = std::max(prompt_excess, excess(got, recorded));
      }
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
    EXPECT_EQ(prompt_excess, 0.0f) << c.model << " (" << c.build << ") prompt " << p << ": a logit beyond the recorded precision";
  }
  std::printf("[ggml parity] %s, llama.cpp's %s build: %d/%zu prompts with all 64 greedy tokens identical, "
              "max|logit diff| %.6f over its top-10 at every step (recorded to 4 decimals)\n",
              c.model, c.build, identical, ref.prompts.size(), max_diff);
}

// The FNV-1a 64 of a file, as scripts/gen-reference-tokens fingerprints the models it measured.
std::string fnv1a64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t h = 0xcbf29ce484222325ull;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0)
    for (std::streamsize i = 0; i < in.gcount(); ++i)
      h = (h ^ static_cast<uint8_t>(buf[i])) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

TEST(GgmlParity, EveryWeightFormatIsLlamaCpps) {
  int files = 0;
  for (const char* build : {"avx512", "avx2"}) {
    const std::string path = std::string(CELLM_SOURCE_DIR) + "/tests/data/reference/formats-" + build + ".json";
    if (!std::filesystem::exists(path)) continue;
    ++files;
    const nlohmann::json data = nlohmann::json::parse(std::ifstream(path));
    for (const auto& c : data.at("cases")) {
      const std::string type = c.at("type");
      SCOPED_TRACE(std::string(build) + " build, " + type);
      model::RandomModelSpec spec = model::random_model_preset(c.at("preset"));
      spec.type = *dtype_from_name(type);
      spec.n_layers = c.at("layers");
      spec.fast = c.at("fast");
      const std::string file_path = ::testing::TempDir() + "cellm-ggml-format-" + type + ".gguf";
      model::write_random_model(spec, file_path);
      ASSERT_EQ(fnv1a64(file_path), c.at("fnv1a64").get<std::string>()) << "not the model llama.cpp ran";
      {
        const auto file = gguf::File::open(file_path);
        cpu::ggml::GgmlCpuBackend backend(1, build_of(build));
        runtime::Executor executor(backend, *file, runtime::ExecutorOptions{});
        const size_t vocab = static_cast<size_t>(executor.vocab_size());
        const kv::SeqId seq = executor.cache().create();
        std::vector<int32_t> tokens = c.at("prompt_ids"), positions(tokens.size());
        std::iota(positions.begin(), positions.end(), 0);
        std::vector<kv::SeqId> seqs(tokens.size(), seq);
        std::vector<int32_t> last = {static_cast<int32_t>(tokens.size() - 1)};
        const std::vector<int32_t> expected = c.at("tokens");
        float max_diff = 0, max_excess = 0;
        for (size_t step = 0; step < expected.size(); ++step) {
          const std::span<const float> logits = executor.run({tokens, positions, seqs, last}).logits.first(vocab);
          const std::vector<int32_t> top_ids = c.at("top_ids")[step];
          const std::vector<float> top_logits = c.at("top_logits")[step];
          for (size_t k = 0; k < top_ids.size(); ++k) {
            max_diff = std::max(max_diff, std::fabs(logits[top_ids[k]] - top_logits[k]));
            max_excess = std::max(max_excess, excess(logits[top_ids[k]], top_logits[k]));
          }
          const auto chosen = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
          EXPECT_EQ(chosen, expected[step]) << "step " << step;
          const int32_t position = static_cast<int32_t>(positions.back()) + 1;
          tokens = {expected[step]}, positions = {position}, seqs = {seq}, last = {0};
        }
        EXPECT_EQ(max_excess, 0.0f) << "a logit beyond the recorded precision";
        std::printf("[ggml parity] %s weights (%s build): max|logit diff| %.6f\n", type.c_str(), build, max_diff);
      }
      std::remove(file_path.c_str());
    }
  }
  ASSERT_GT(files, 0) << "no tests/data/reference/formats-*.json";
}

INSTANTIATE_TEST_SUITE_P(DefaultModels, GgmlParity,
                         ::testing::Values(ParityCase{"smollm2", test::kSmolLM2, "avx512"},
                                           ParityCase{"smollm2", test::kSmolLM2, "avx2"},
                                           ParityCase{"gemma3", test::kGemma3, "avx512"},
                                           ParityCase{"gemma3", test::kGemma3, "avx2"}),
                         [](const auto& parity_case) { return std::string(parity_case.param.model) + "_" + parity_case.param.build; });

}  // namespace
}  // namespace cellm
