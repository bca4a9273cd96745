#include <gtest/gtest.h>

#include <set>

#include "batching/bench.h"
#include "batching/bench_report.h"
#include "common/tiny_models.h"
#include "core/error.h"

namespace cellm::batching {
namespace {

EngineOptions tiny_engine_options(int32_t max_sessions) {
  EngineOptions o;
  o.model_path = test::tiny_model("tiny-llama");
  o.backend.name = "cpu";
  o.backend.threads = 2;
  o.executor.max_write = 64;
  o.executor.max_decode_batch = 16;
  o.runner.max_sessions = max_sessions;
  o.runner.max_step_tokens = 64;
  return o;
}

TEST(LatencyStats, InterpolatesPercentilesLikeNumpy) {
  const LatencyStats s = latency_stats({4, 1, 3, 2});
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.p50_ms, 2.5);
  EXPECT_DOUBLE_EQ(s.p99_ms, 3.97);
  EXPECT_DOUBLE_EQ(s.max_ms, 4);
  const LatencyStats empty = latency_stats({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.max_ms, 0);
}

TEST(SyntheticPrompt, SeededAndFreeOfSpecialTokens) {
  Engine engine(tiny_engine_options(1));
  const auto& tok = engine.tokenizer();
  const auto a = synthetic_prompt(tok, 300, 5);
  ASSERT_EQ(a.size(), 300u);
  EXPECT_EQ(a, synthetic_prompt(tok, 300, 5));
  EXPECT_NE(a, synthetic_prompt(tok, 300, 6));
  std::set<int32_t> distinct(a.begin(), a.end());
  EXPECT_GT(distinct.size(), 100u);  // random ids, not one repeated token
  for (int32_t id : a) {
    EXPECT_EQ(tok.token_type(id), tokenizer::TokenType::Normal) << id;
    EXPECT_FALSE(tok.is_end_of_generation(id)) << id;
  }
}

TEST(RunBenchmark, CountsEveryTokenOfEveryBatch) {
  Engine engine(tiny_engine_options(4));
  BenchConfig c;
  c.prompt_tokens = 20;
  c.generated_tokens = 6;
  c.batch_sizes = {1, 4};
  c.repetitions = 2;
  const BenchResult r = run_benchmark(engine, c);
  EXPECT_GT(r.warmup_ms, 0);
  ASSERT_EQ(r.points.size(), 2u);
  for (const BenchPoint& p : r.points) {
    SCOPED_TRACE(p.batch);
    EXPECT_EQ(p.prompt_tokens, p.batch * 20);
    EXPECT_EQ(p.generated_tokens, p.batch * 6);
    ASSERT_EQ(p.rounds.size(), 2u);
    EXPECT_EQ(p.ttft.count, 2 * p.batch);
    EXPECT_EQ(p.itl.count, 2 * p.batch * 5);
    EXPECT_GT(p.prompt_tok_s, 0);
    EXPECT_GT(p.generation_tok_s, 0);
    EXPECT_LE(p.ttft.p50_ms, p.ttft.max_ms);
    EXPECT_LE(p.itl.p50_ms, p.itl.p99_ms);
    EXPECT_GE(p.steps, 2 * 6);  // at least one forward per token of a round
    for (const BenchRound& round : p.rounds) {
      // Every token after each generation's first comes in the decode window at most.
      EXPECT_GT(round.decode_tokens, 0);
      EXPECT_LE(round.decode_tokens, p.batch * 5);
      EXPECT_GT(round.prefill_ms, 0);
    }
  }
  const nlohmann::json j = bench_json(engine, r);
  EXPECT_EQ(j["schema"], kBenchSchema);
  EXPECT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][1]["batch"], 4);
  EXPECT_EQ(j["results"][1]["itl_ms"]["count"], 40);
  EXPECT_EQ(j["bench"]["batch_sizes"], nlohmann::json({1, 4}));
  EXPECT_TRUE(j.contains("kv") && j.contains("load_ms") && j.contains("date"));
  // The weights a decode step streams: all but part of the file (a tied table counts whole).
  const size_t weight_bytes = engine.executor().decode_weight_bytes();
  EXPECT_GT(weight_bytes, 0u);
  EXPECT_LE(weight_bytes, engine.file().tensor_bytes());
  EXPECT_EQ(j["decode_weight_bytes"], weight_bytes);
  for (size_t i = 0; i < r.points.size(); ++i)
    EXPECT_DOUBLE_EQ(j["results"][i]["weight_stream_gb_s"].get<double>(),
                     r.points[i].generation_tok_s / r.points[i].batch * static_cast<double>(weight_bytes) / 1e9);
}

TEST(RunBenchmark, RefusesABatchTheRunnerCannotHoldAtOnce) {
  Engine engine(tiny_engine_options(2));
  BenchConfig c;
  c.prompt_tokens = 8;
  c.generated_tokens = 2;
  c.batch_sizes = {1, 3};
  try {
    run_benchmark(engine, c);
    FAIL() << "batch 3 with max_sessions 2 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_sessions (2)"), std::string::npos) << e.what();
  }
  c.batch_sizes = {1};
  c.prompt_tokens = 2040;
  c.generated_tokens = 16;  // tiny-llama's context is 2048
  EXPECT_THROW(run_benchmark(engine, c), Error);
}

}  // namespace
}  // namespace cellm::batching
