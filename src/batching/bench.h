#pragma once
// The throughput benchmark behind `cellm bench`. For each batch size b, b generations are
// submitted at once, each with a synthetic prompt of `prompt_tokens` tokens, and each runs
// exactly `generated_tokens` tokens (ignore_eos; greedy unless `sampling` says otherwise, each
// generation then drawing from its own seed). Per batch size it measures:
//   prompt throughput      b * prompt_tokens / prefill time, where the prefill time runs from
//                          the submission until every generation has its first token;
//   generation throughput  tokens emitted after that point / time from there to the last token;
//   TTFT                   submission -> first token, per generation;
//   inter-token latency    gaps between consecutive tokens of one generation.
// Before measuring, a warm-up pays the one-time costs (weights paged in, scratch buffers sized
// for the longest prefill, one decode width per batch size, which on CUDA captures its graph):
// one generation with the full prompt and 2 tokens, then per batch size b generations with an
// 8-token prompt and 4 tokens. Nothing here asserts a time.
#include <cstdint>
#include <vector>

#include "batching/bench_stats.h"
#include "batching/engine.h"
#include "runtime/step_host_times.h"

namespace cellm::batching {

struct BenchConfig {
  int32_t prompt_tokens = 512;
  int32_t generated_tokens = 128;
  std::vector<int32_t> batch_sizes = {1, 8, 64};
  int32_t repetitions = 1;  // rounds per batch size; the figures pool them
  uint64_t seed = 1;        // of the synthetic prompts (and of the samplers)
  bool warmup = true;
  // Greedy by default; a temperature measures the host's draw too (the logits of every row
  // then cross from the device).
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

// One round: b generations submitted together.
struct BenchRound {
  double prefill_ms = 0;  // submission -> every generation has its first token
  double decode_ms = 0;   // -> the last token of the round
  int64_t decode_tokens = 0;  // tokens emitted after the prefill time
  double prompt_tok_s = 0;
  double generation_tok_s = 0;  // 0 when no token came after the prefill time (1 token each)
};

// The figures of one batch size over all its rounds.
struct BenchPoint {
  int32_t batch = 0;
  int64_t prompt_tokens = 0;     // per round: batch x prompt_tokens
  int64_t generated_tokens = 0;  // per round: batch x generated_tokens
  double prompt_tok_s = 0;       // all rounds' prompt tokens / all rounds' prefill time
  double generation_tok_s = 0;   // all rounds' decode tokens / all rounds' decode time
  LatencyStats ttft;             // one value per generation of every round
  LatencyStats itl;              // one value per token gap of every generation
  int64_t steps = 0;             // forwards the rounds took
  int64_t preemptions = 0;
  runtime::StepHostTimes decode_host;  // the executor's decode steps of the rounds, phase by phase
  double decode_gap_us = 0;            // the engine's time between two decode steps in a row, mean
  std::vector<BenchRound> rounds;
};

struct BenchResult {
  BenchConfig config;
  double warmup_ms = 0;
  std::vector<BenchPoint> points;  // in the order of config.batch_sizes
};

// The rate at which generation streamed weights, in GB/s: a decode step reads
// `decode_weight_bytes` (Executor::decode_weight_bytes) and yields one token per generation of
// the batch, so steps / s = generation_tok_s / batch. At batch 1, over the measured HBM read
// rate, it is the fraction of the decode roofline reached.
double weight_stream_gb_s(const BenchPoint& point, size_t decode_weight_bytes);

// Runs the benchmark on the engine's runner, which must admit the largest batch at once
// (max_sessions and max_waiting >= it). Throws InvalidArgument for sizes out of range or a
// runner too small, LimitExceeded when prompt + output exceed the context, Internal when a
// generation does not run to exactly generated_tokens tokens (its error named).
BenchResult run_benchmark(Engine& engine, const BenchConfig& config);

// `length` token ids drawn (seeded) from the vocabulary's normal tokens, never a control,
// unused or end-of-generation token; starts with BOS when the tokenizer adds one.
std::vector<int32_t> synthetic_prompt(const tokenizer::Tokenizer& tokenizer, int32_t length, uint64_t seed);

}  // namespace cellm::batching
