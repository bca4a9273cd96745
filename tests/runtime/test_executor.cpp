#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/expect_error.h"
#include "common/faulty_backend.h"
#include "common/test_models.h"
#include "common/tiny_models.h"
#include "core/error.h"
#include "gguf/file.h"
#include "runtime/executor.h"

namespace cellm::runtime {
namespace {

struct Fixture {
  explicit Fixture(const std::string& path, int32_t max_write = 64)
      : file(gguf::File::open(path)), backend(2), executor(backend, *file, options(max_write)) {}
  static ExecutorOptions options(int32_t max_write) {
    ExecutorOptions o;
    o.max_write = max_write;
    o.max_decode_batch = 8;
    o.cache.initial_rows = 32;
    return o;
  }
  std::unique_ptr<gguf::File> file;
  cpu::CpuBackend backend;
  Executor executor;
};

std::vector<int32_t> prompt_tokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 37 + 11 + salt * 101) % vocab;
  return t;
}

// Runs `tokens` for a fresh sequence in slices of `chunk`, returning every position's logits.
std::vector<float> prefill(Executor& ex, const std::vector<int32_t>& tokens, int chunk) {
  const kv::SeqId seq = ex.cache().create();
  std::vector<float> all;
  for (size_t start = 0; start < tokens.size(); start += chunk) {
    const size_t n = std::min<size_t>(chunk, tokens.size() - start);
    std::vector<int32_t> t(tokens.begin() + start, tokens.begin() + start + n), pos(n), rows(n);
    std::vector<kv::SeqId> seqs(n, seq);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(start));
    std::iota(rows.begin(), rows.end(), 0);
    const auto logits = ex.run({t, pos, seqs, rows}).logits;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  ex.cache().remove(seq);
  return all;
}

class ExecutorOnTinyModels : public ::testing::TestWithParam<const char*> {};

TEST_P(ExecutorOnTinyModels, ChunkedPrefillEqualsOneShotExactly) {
  Fixture f(test::tiny_model(GetParam()));
  const auto tokens = prompt_tokens(40, f.executor.vocab_size());
  const auto one_shot = prefill(f.executor, tokens, 40);
  const auto chunked = prefill(f.executor, tokens, 7);
  const auto single = prefill(f.executor, tokens, 1);  // every step a decode step
  ASSERT_EQ(one_shot.size(), chunked.size());
  // Rows are computed independently of each other, so slicing changes nothing, bit for bit.
  EXPECT_EQ(one_shot, chunked);
  EXPECT_EQ(one_shot, single);
  EXPECT_EQ(f.executor.cache().metrics().live_cells, 0);
}

TEST_P(ExecutorOnTinyModels, StackedProjectionsGiveTheSameLogits) {
  Fixture stacked(test::tiny_model(GetParam()));
  setenv("CELLM_STACK_PROJECTIONS", "0", 1);
  Fixture separate(test::tiny_model(GetParam()));
  unsetenv("CELLM_STACK_PROJECTIONS");
  const auto tokens = prompt_tokens(24, stacked.executor.vocab_size());
  // Each output element is the same dot product whether its weight row sits in a stacked
  // matrix or its own, and views read the same columns: bit for bit the same logits.
  EXPECT_EQ(prefill(stacked.executor, tokens, 24), prefill(separate.executor, tokens, 24));
  EXPECT_EQ(prefill(stacked.executor, tokens, 1), prefill(separate.executor, tokens, 1));
}

TEST_P(ExecutorOnTinyModels, BatchedSequencesMatchTheirSoloRuns) {
  Fixture f(test::tiny_model(GetParam()));
  const int vocab = f.executor.vocab_size();
  const auto a = prompt_tokens(13, vocab, 1), b = prompt_tokens(21, vocab, 2);
  const auto solo_a = prefill(f.executor, a, 13), solo_b = prefill(f.executor, b, 21);
  // Both prompts in one forward, interleaved token by token where both have one.
  const kv::SeqId sa = f.executor.cache().create(), sb = f.executor.cache().create();
  std::vector<int32_t> t, pos, rows;
  std::vector<kv::SeqId> seqs;
  for (int i = 0; i < 21; ++i) {
    if (i < 13) {
      t.push_back(a[i]), pos.push_back(i), seqs.push_back(sa);
    }
    t.push_back(b[i]), pos.push_back(i), seqs.push_back(sb);
  }
  rows.resize(t.size());
  std::iota(rows.begin(), rows.end(), 0);
  const auto logits = f.executor.run({t, pos, seqs, rows}).logits;
  const size_t v = static_cast<size_t>(vocab);
  int ia = 0, ib = 0;
  for (size_t r = 0; r < t.size(); ++r) {
    const std::vector<float> row(logits.begin() + r * v, logits.begin() + (r + 1) * v);
    if (seqs[r] == sa) {
      EXPECT_EQ(row, std::vector<float>(solo_a.begin() + ia * v, solo_a.begin() + (ia + 1) * v)) << "a row " << ia;
      ++ia;
    } else {
      EXPECT_EQ(row, std::vector<float>(solo_b.begin() + ib * v, solo_b.begin() + (ib + 1) * v)) << "b row " << ib;
      ++ib;
    }
  }
}

TEST_P(ExecutorOnTinyModels, FailedForwardAdvancesNothing) {
  Fixture f(test::tiny_model(GetParam()));
  const kv::SeqId seq = f.executor.cache().create();
  const std::vector<int32_t> t = {5, 6, 7}, pos = {0, 1, 2}, rows = {2};
  const std::vector<kv::SeqId> seqs(3, seq);
  const kv::CacheMetrics before = f.executor.cache().metrics();
  f.executor.set_fault_hook([] { throw Error(ErrorCode::Internal, "injected forward failure"); });
  EXPECT_THROW(f.executor.run({t, pos, seqs, rows}), Error);
  const kv::CacheMetrics after = f.executor.cache().metrics();
  EXPECT_EQ(after.live_cells, before.live_cells);
  EXPECT_EQ(after.pages_in_use, before.pages_in_use);
  EXPECT_EQ(f.executor.cache().length(seq), 0);
  EXPECT_EQ(f.executor.stats().failed_steps, 1);
  f.executor.set_fault_hook(nullptr);
  EXPECT_NO_THROW(f.executor.run({t, pos, seqs, rows}));
  EXPECT_EQ(f.executor.cache().length(seq), 3);
}

TEST_P(ExecutorOnTinyModels, RefusesBadSteps) {
  Fixture f(test::tiny_model(GetParam()), 8);
  const kv::SeqId seq = f.executor.cache().create();
  const std::vector<int32_t> rows = {0};
  const std::vector<kv::SeqId> one(1, seq);
  const std::vector<int32_t> pos0 = {0};
  const std::vector<int32_t> bad_token = {f.executor.vocab_size()};
  expect_error(ErrorCode::InvalidArgument, "outside the vocabulary",
               [&] { f.executor.run({bad_token, pos0, one, rows}); });
  const std::vector<int32_t> token = {1}, pos5 = {5};
  EXPECT_THROW(f.executor.run({token, pos5, one, rows}), Error);  // not the next position
  const std::vector<int32_t> nine(9, 1), nine_pos = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<kv::SeqId> nine_seq(9, seq);
  expect_error(ErrorCode::LimitExceeded, "", [&] { f.executor.run({nine, nine_pos, nine_seq, rows}); });
  EXPECT_EQ(f.executor.cache().metrics().live_cells, 0);
}

TEST_P(ExecutorOnTinyModels, DecodeStepsUseTheDecodeProgram) {
  Fixture f(test::tiny_model(GetParam()));
  const kv::SeqId a = f.executor.cache().create(), b = f.executor.cache().create();
  const std::vector<int32_t> t = {3, 4}, pos = {0, 0}, rows = {0, 1};
  const std::vector<kv::SeqId> seqs = {a, b};
  f.executor.run({t, pos, seqs, rows});
  EXPECT_EQ(f.executor.stats().decode_steps, 1);
  EXPECT_EQ(f.executor.program(model::Method::Decode, 2).max_tokens, 2);
  EXPECT_EQ(f.executor.program(model::Method::Decode, 3).max_tokens, 4);
}

// A decode program computes every row (it has no gather), so a decode step that wants some of
// its rows' output, in another order, is answered from the right rows: the same logits and
// argmax as the same step asking for all of them.
TEST_P(ExecutorOnTinyModels, ADecodeStepAnswersTheRowsItAsksFor) {
  Fixture f(test::tiny_model(GetParam()));
  const size_t v = static_cast<size_t>(f.executor.vocab_size());
  std::vector<kv::SeqId> seqs;
  for (int s = 0; s < 3; ++s) {
    seqs.push_back(f.executor.cache().create());
    const std::vector<int32_t> t = {3 + s, 9}, pos = {0, 1}, last = {1};
    const std::vector<kv::SeqId> own(2, seqs.back());
    f.executor.run({t, pos, own, last});
  }
  // Three copies of the three sequences, so that each request decodes the same state.
  std::vector<kv::SeqId> logits_twins, argmax_twins;
  for (kv::SeqId s : seqs) {
    logits_twins.push_back(f.executor.cache().clone(s, 2));
    argmax_twins.push_back(f.executor.cache().clone(s, 2));
  }
  const std::vector<int32_t> next = {7, 8, 9}, at = {2, 2, 2}, all = {0, 1, 2}, some = {2, 0};
  const auto every_span = f.executor.run({next, at, seqs, all}).logits;
  const std::vector<float> every(every_span.begin(), every_span.end());
  ASSERT_EQ(every.size(), 3 * v);
  const auto picked = f.executor.run({next, at, logits_twins, some}).logits;
  ASSERT_EQ(picked.size(), 2 * v);
  EXPECT_TRUE(std::equal(picked.begin(), picked.begin() + v, every.begin() + 2 * v)) << "row 2";
  EXPECT_TRUE(std::equal(picked.begin() + v, picked.end(), every.begin())) << "row 0";
  const auto argmax = f.executor.run({next, at, argmax_twins, some, StepOutput::Argmax}).argmax;
  ASSERT_EQ(argmax.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto row = every.begin() + static_cast<ptrdiff_t>(some[i] * v);
    EXPECT_EQ(argmax[i], std::max_element(row, row + static_cast<ptrdiff_t>(v)) - row) << "row " << some[i];
  }
  EXPECT_EQ(f.executor.stats().decode_steps, 3);
}

INSTANTIATE_TEST_SUITE_P(Archs, ExecutorOnTinyModels, ::testing::Values("tiny-llama", "tiny-gemma3"));

// A step's inputs travel in one copy and the cell table's new rows in one more, however many
// sequences decode together: each input array, and each new cell, had taken a copy of its own.
TEST(ExecutorCopies, ADecodeStepOfFourSequencesMakesTwoCopies) {
  const auto file = gguf::File::open(test::tiny_model("tiny-llama"));
  test::FaultyBackend backend(2);
  Executor ex(backend, *file, Fixture::options(64));
  std::vector<kv::SeqId> seqs;
  std::vector<int32_t> t, pos, rows;
  for (int s = 0; s < 4; ++s) {
    const kv::SeqId seq = ex.cache().create();
    for (int i = 0; i < 5; ++i) t.push_back(3 + s + i), pos.push_back(i), seqs.push_back(seq);
    rows.push_back(static_cast<int32_t>(t.size()) - 1);
  }
  ex.run({t, pos, seqs, rows});
  const std::vector<int32_t> next = {7, 8, 9, 10}, at = {5, 5, 5, 5}, all = {0, 1, 2, 3};
  const std::vector<kv::SeqId> four = {seqs[0], seqs[5], seqs[10], seqs[15]};
  const int64_t before = backend.uploads;
  ex.run({next, at, four, all});
  EXPECT_EQ(backend.uploads - before, 2);
  EXPECT_EQ(ex.stats().decode_steps, 1);
}

// Decode steps are timed phase by phase (a prefill and a failed step are not), and the phases
// fit in the step: the time the step spends before its forward is issued (here a hook that
// sleeps) is counted as its inputs' time.
TEST(ExecutorHostTimes, OnlyDecodeStepsAreTimedAndTheirPhasesFitInTheStep) {
  Fixture f(test::tiny_model("tiny-llama"));
  Executor& ex = f.executor;
  const kv::SeqId seq = ex.cache().create();
  const std::vector<int32_t> prompt = {3, 4, 5}, pos = {0, 1, 2}, last = {2}, first = {0};
  const std::vector<kv::SeqId> seqs(3, seq);
  ex.run({prompt, pos, seqs, last});
  EXPECT_EQ(ex.stats().decode_host.steps, 0);

  constexpr auto kSleep = std::chrono::milliseconds(3);
  ex.set_fault_hook([&] { std::this_thread::sleep_for(kSleep); });
  const std::vector<kv::SeqId> one = {seq};
  for (int32_t p = 3; p < 5; ++p) {
    const std::vector<int32_t> token = {6 + p}, at = {p};
    ex.run({token, at, one, first});
  }
  ex.set_fault_hook([] { throw Error(ErrorCode::Internal, "injected"); });
  const std::vector<int32_t> token = {9}, at = {5};
  EXPECT_THROW(ex.run({token, at, one, first}), Error);

  const StepHostTimes& t = ex.stats().decode_host;
  EXPECT_EQ(t.steps, 2);
  EXPECT_GE(t.inputs_s, 2 * std::chrono::duration<double>(kSleep).count());
  EXPECT_GE(t.launch_s, 0.0);
  EXPECT_GE(t.wait_s, 0.0);
  EXPECT_LE(t.inputs_s + t.launch_s + t.wait_s, t.total_s);
  const StepHostTimes none = t.since(t);
  EXPECT_EQ(none.steps, 0);
  EXPECT_EQ(none.total_s, 0.0);
}

// The real default model continues "The capital of France is" with " Paris".
TEST(ExecutorOnDefaultModel, SmolLM2KnowsTheCapitalOfFrance) {
  CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
  Fixture f(path);
  const auto& vocab = f.file->get_string_array("tokenizer.ggml.tokens");
  auto id = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(vocab.begin(), vocab.end(), s) - vocab.begin());
  };
  const std::vector<int32_t> tokens = {id("The"), id("Ġcapital"), id("Ġof"), id("ĠFrance"), id("Ġis")};
  const kv::SeqId seq = f.executor.cache().create();
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4}, rows = {4};
  const std::vector<kv::SeqId> seqs(5, seq);
  const auto logits = f.executor.run({tokens, pos, seqs, rows}).logits;
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  EXPECT_EQ(vocab[best], "ĠParis");
}

}  // namespace
}  // namespace cellm::runtime
