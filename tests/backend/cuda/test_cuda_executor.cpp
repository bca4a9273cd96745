// End to end: the executor running whole models on the GPU and on the CPU, compared step by
// step. Synthetic models (every weight format, llama and gemma3 with sliding windows) run
// everywhere there is a GPU; the default models, when present, must both continue "The
// capital of France is" with Paris.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "../../common/test_models.h"
#include "cuda_test_support.h"
#include "gguf/file.h"
#include "runtime/executor.h"
#include "synthetic_model.h"

namespace cellm::cuda::testing {
namespace {

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Largest minus second largest.
float margin(std::span<const float> row) {
  std::vector<float> v(row.begin(), row.end());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

struct Sequence {
  kv::SeqId id;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens
  int32_t length = 0;           // tokens already in the cache
};

// What the steps of a run found: logit differences, and greedy choices where the CPU's top two
// are far enough apart for the choice to be meaningful.
struct StepComparison {
  double max_abs_diff = 0;
  double max_abs_logit = 0;
  int greedy_checked = 0;
  int greedy_equal = 0;
};

class TwinExecutors {
 public:
  TwinExecutors(CudaBackend& gpu, const gguf::File& file, const runtime::ExecutorOptions& options)
      : cpu_(cpu_backend(), file, options), gpu_(gpu, file, options) {
    // Poison the GPU pool: a kernel that reads a cell it must not see turns logits into NaN.
    const kv::KvStorage& s = gpu_.cache().storage();
    std::vector<uint8_t> nan(s.allocated_bytes(), 0xff);
    gpu.upload(s.base(), nan.data(), nan.size());
  }

  Sequence start(std::vector<int32_t> prompt) {
    const kv::SeqId a = cpu_.cache().create(), b = gpu_.cache().create();
    EXPECT_EQ(a, b);
    return {a, std::move(prompt), 0};
  }

  // Feeds every sequence's pending tokens in one step, asks the logits of each sequence's last
  // token, appends the CPU's greedy choice (teacher forcing keeps the two in step).
  void step(std::vector<Sequence*> seqs, StepComparison& cmp) {
    std::vector<int32_t> tokens, positions, logit_rows;
    std::vector<kv::SeqId> ids;
    for (Sequence* s : seqs) {
      for (size_t i = static_cast<size_t>(s->length); i < s->tokens.size(); ++i) {
        tokens.push_back(s->tokens[i]);
        positions.push_back(static_cast<int32_t>(i));
        ids.push_back(s->id);
      }
      logit_rows.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    const runtime::StepRequest req{tokens, positions, ids, logit_rows};
    const std::vector<float> cpu_logits = [&] {
      auto l = cpu_.run(req).logits;
      return std::vector<float>(l.begin(), l.end());
    }();
    const auto gpu_logits = gpu_.run(req).logits;
    ASSERT_EQ(cpu_logits.size(), gpu_logits.size());
    const size_t vocab = static_cast<size_t>(cpu_.vocab_size());
    for (size_t r = 0; r < seqs.size(); ++r) {
      const std::span<const float> c(cpu_logits.data() + r * vocab, vocab), g(gpu_logits.data() + r * vocab, vocab);
      for (size_t i = 0; i < vocab; ++i) {
        ASSERT_TRUE(std::isfinite(g[i])) << "GPU logit " << i << " of row " << r << " is " << g[i];
        cmp.max_abs_diff = std::max(cmp.max_abs_diff, static_cast<double>(std::fabs(g[i] - c[i])));
        cmp.max_abs_logit = std::max(cmp.max_abs_logit, static_cast<double>(std::fabs(c[i])));
      }
      const int32_t choice = argmax(c);
      if (margin(c) > 0.02f * static_cast<float>(cmp.max_abs_logit)) {
        ++cmp.greedy_checked;
        cmp.greedy_equal += argmax(g) == choice;
      }
      seqs[r]->length = static_cast<int32_t>(seqs[r]->tokens.size());
      seqs[r]->tokens.push_back(choice);
    }
  }

  runtime::Executor& gpu() { return gpu_; }

 private:
  runtime::Executor cpu_;
  runtime::Executor gpu_;
};

void run_synthetic(CudaBackend& gpu, const SyntheticModel& model, const char* what) {
  const std::vector<uint8_t> bytes = write_synthetic_model(model, 2024);
  auto file = gguf::File::parse(bytes, what);
  runtime::ExecutorOptions options;
  options.max_write = 64;
  options.max_decode_batch = 4;
  options.cache.page_cells = 16;
  options.cache.initial_rows = 32;  // grows during the run
  TwinExecutors twins(gpu, *file, options);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, model.vocab - 1);
  auto prompt = [&](int n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = token(rng);
    return p;
  };
  Sequence a = twins.start(prompt(21)), b = twins.start(prompt(5));
  StepComparison cmp;
  twins.step({&a, &b}, cmp);  // one prefill step for both prompts (26 rows: tensor-core path)
  for (int i = 0; i < 12; ++i) twins.step({&a, &b}, cmp);  // decode steps (GEMV, attention split over blocks)
  Sequence c = twins.start(prompt(3));
  twins.step({&c}, cmp);
  for (int i = 0; i < 4; ++i) twins.step({&a, &c, &b}, cmp);  // a three-row decode bucket (padded to 4)

  EXPECT_LE(cmp.max_abs_diff, 0.03 * cmp.max_abs_logit) << what << ": logits differ by " << cmp.max_abs_diff
                                                         << " at a scale of " << cmp.max_abs_logit;
  EXPECT_GT(cmp.greedy_checked, 20) << what;
  EXPECT_EQ(cmp.greedy_equal, cmp.greedy_checked) << what;
  EXPECT_GT(twins.gpu().cache().metrics().growth_count, 0) << what << ": the pool should have grown";
  const bool vmm = gpu.default_kv_growth() == KvGrowth::Vmm;
  if (vmm) {
    EXPECT_EQ(twins.gpu().stats().rebinds, 0) << what << ": in-place growth must not move the pool";
  } else {
    EXPECT_GT(twins.gpu().stats().rebinds, 0) << what << ": copy-growth moves the pool";
  }
  std::printf("[ info ] %s (KV growth %s): max |logit diff| %.4g at logit scale %.4g, greedy %d/%d equal, rebinds %lld\n",
              what, kv_growth_name(gpu.default_kv_growth()), cmp.max_abs_diff, cmp.max_abs_logit, cmp.greedy_equal,
              cmp.greedy_checked, static_cast<long long>(twins.gpu().stats().rebinds));
}

TEST(CudaExecutor, SyntheticLlamaMatchesCpu) {
  CELLM_REQUIRE_GPU(gpu);
  run_synthetic(gpu, synthetic_llama(), "synthetic llama");
}

TEST(CudaExecutor, SyntheticGemma3MatchesCpu) {
  CELLM_REQUIRE_GPU(gpu);
  run_synthetic(gpu, synthetic_gemma3(), "synthetic gemma3");
}

TEST(CudaExecutor, CopyGrowthBackendMatchesCpuAndRebinds) {
  CELLM_REQUIRE_GPU(gpu);
  (void)gpu;  // a second backend, with copy-growth, runs this test
  setenv("CELLM_KV_GROWTH", "copy", 1);
  std::unique_ptr<CudaBackend> copying;
  try {
    copying = std::make_unique<CudaBackend>(0);
  } catch (...) {
    unsetenv("CELLM_KV_GROWTH");
    throw;
  }
  unsetenv("CELLM_KV_GROWTH");
  ASSERT_EQ(copying->default_kv_growth(), KvGrowth::Copy);
  run_synthetic(*copying, synthetic_gemma3(), "synthetic gemma3, copy-growth");
}

int32_t token_id(const gguf::File& file, const std::string& text) {
  const auto& tokens = file.get_string_array("tokenizer.ggml.tokens");
  const auto it = std::find(tokens.begin(), tokens.end(), text);
  if (it == tokens.end()) ADD_FAILURE() << "token '" << text << "' is not in " << file.name();
  return static_cast<int32_t>(it - tokens.begin());
}

// Greedy continuation of `prompt` for n tokens on one backend.
std::vector<int32_t> greedy(backend::Backend& backend, const gguf::File& file, std::vector<int32_t> prompt, int n) {
  runtime::ExecutorOptions options;
  options.max_write = 64;
  options.max_decode_batch = 1;
  runtime::Executor exec(backend, file, options);
  const kv::SeqId seq = exec.cache().create();
  std::vector<int32_t> out;
  std::vector<int32_t> tokens = std::move(prompt);
  int32_t pos = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> positions(tokens.size());
    for (size_t j = 0; j < tokens.size(); ++j) positions[j] = pos + static_cast<int32_t>(j);
    const std::vector<kv::SeqId> ids(tokens.size(), seq);
    const std::vector<int32_t> rows = {static_cast<int32_t>(tokens.size()) - 1};
    const auto logits = exec.run({tokens, positions, ids, rows}).logits;
    pos += static_cast<int32_t>(tokens.size());
    out.push_back(argmax(logits));
    tokens = {out.back()};
  }
  return out;
}

void expect_paris(CudaBackend& gpu, const char* model, const std::vector<std::string>& prompt_text,
                  const std::string& paris) {
  CELLM_REQUIRE_MODEL(path, model);
  auto file = gguf::File::open(path);
  std::vector<int32_t> prompt;
  for (const auto& t : prompt_text) prompt.push_back(token_id(*file, t));
  const int32_t paris_id = token_id(*file, paris);
  const auto on_gpu = greedy(gpu, *file, prompt, 8);
  const auto on_cpu = greedy(cpu_backend(), *file, prompt, 8);
  // Paris within the first 8 greedy tokens (a base model first repeats the question's words).
  EXPECT_NE(std::find(on_gpu.begin(), on_gpu.end(), paris_id), on_gpu.end()) << model << " on the GPU";
  EXPECT_NE(std::find(on_cpu.begin(), on_cpu.end(), paris_id), on_cpu.end()) << model << " on the CPU";
  int same = 0;
  while (same < 8 && on_gpu[same] == on_cpu[same]) ++same;
  EXPECT_GE(same, 3) << model << ": GPU and CPU greedy tokens diverge early";
  std::printf("[ info ] %s: GPU and CPU agree on the first %d of 8 greedy tokens\n", model, same);
}

TEST(CudaExecutor, SmolLM2SaysParis) {
  CELLM_REQUIRE_GPU(gpu);
  expect_paris(gpu, test::kSmolLM2, {"The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"}, "ĠParis");
}

TEST(CudaExecutor, Gemma3SaysParis) {
  CELLM_REQUIRE_GPU(gpu);
  // "What is the capital of France?" raw (Gemma 3 270M is a base model): "\n\nThe capital of France is Paris."
  expect_paris(gpu, test::kGemma3, {"<bos>", "What", "▁is", "▁the", "▁capital", "▁of", "▁France", "?"}, "▁Paris");
}

}  // namespace
}  // namespace cellm::cuda::testing
