#include "batching/bench.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>

#include "core/error.h"
#include "core/log.h"

namespace cellm::batching {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// What one round left behind: when it was submitted and when each generation got each token.
struct Trace {
  Clock::time_point start;
  std::vector<std::vector<Clock::time_point>> token_times;  // per generation
  std::vector<GenerationResult> results;
};

// Submits every request at once and waits until all have finished.
Trace run_round(Runner& runner, std::vector<GenerationRequest> requests) {
  const size_t n = requests.size();
  Trace trace;
  trace.token_times.resize(n);
  trace.results.resize(n);
  for (auto& times : trace.token_times) times.reserve(static_cast<size_t>(requests[0].max_tokens));
  std::mutex mutex;
  std::condition_variable cv;
  size_t finished = 0;
  trace.start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    GenerationCallbacks callbacks;
    // Runs on the engine thread; only this generation's vector is touched, and the reader waits
    // for on_finish under the mutex.
    callbacks.on_token = [&trace, i](GenerationId, int32_t token, const std::string&) {
      if (token >= 0) trace.token_times[i].push_back(Clock::now());
    };
    callbacks.on_finish = [&, i](const GenerationResult& r) {
      std::lock_guard<std::mutex> lock(mutex);
      trace.results[i] = r;
      ++finished;
      cv.notify_all();
    };
    runner.submit(std::move(requests[i]), std::move(callbacks));
  }
  std::unique_lock<std::mutex> lock(mutex);
  cv.wait(lock, [&] { return finished == n; });
  return trace;
}

void check_round(const Trace& trace, int32_t expected_tokens) {
  for (const GenerationResult& r : trace.results) {
    if (r.finish_reason == FinishReason::Failed) fail(ErrorCode::Internal, "benchmark generation failed: ", r.error);
    if (static_cast<int32_t>(r.tokens.size()) != expected_tokens)
      fail(ErrorCode::Internal, "benchmark generation ", r.tag, " produced ", r.tokens.size(), " tokens (",
           finish_reason_name(r.finish_reason), "), not ", expected_tokens);
  }
}

// The tokens a synthetic prompt is drawn from: normal tokens that do not end a generation.
std::vector<int32_t> prompt_candidates(const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> normal;
  for (size_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const auto token = static_cast<int32_t>(id);
    if (tokenizer.token_type(token) == tokenizer::TokenType::Normal && !tokenizer.is_end_of_generation(token))
      normal.push_back(token);
  }
  if (normal.empty()) fail(ErrorCode::Unsupported, "the vocabulary has no normal token to build a prompt from");
  return normal;
}

std::vector<int32_t> draw_prompt(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& candidates,
                                 int32_t length, uint64_t seed) {
  std::vector<int32_t> prompt;
  prompt.reserve(static_cast<size_t>(length));
  if (tokenizer.adds_bos() && length > 0) prompt.push_back(tokenizer.bos());
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, candidates.size() - 1);
  while (static_cast<int32_t>(prompt.size()) < length) prompt.push_back(candidates[pick(rng)]);
  return prompt;
}

std::vector<GenerationRequest> make_requests(const tokenizer::Tokenizer& tokenizer, const BenchConfig& c, int32_t batch,
                                             int32_t prompt_tokens, int32_t max_tokens, uint64_t seed) {
  const std::vector<int32_t> candidates = prompt_candidates(tokenizer);
  std::vector<GenerationRequest> requests(static_cast<size_t>(batch));
  for (int32_t i = 0; i < batch; ++i) {
    GenerationRequest& r = requests[static_cast<size_t>(i)];
    r.prompt = draw_prompt(tokenizer, candidates, prompt_tokens, seed * 1000003 + static_cast<uint64_t>(i));
    r.sampling.temperature = c.temperature;
    r.sampling.top_k = c.top_k;
    r.sampling.top_p = c.top_p;
    r.sampling.min_p = c.min_p;
    r.sampling.seed = seed * 1000003 + static_cast<uint64_t>(i);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.tag = std::string("b").append(std::to_string(batch)).append("/").append(std::to_string(i));
  }
  return requests;
}

void warm_up(Engine& engine, const BenchConfig& c) {
  const tokenizer::Tokenizer& tok = engine.tokenizer();
  check_round(run_round(engine.runner(), make_requests(tok, c, 1, c.prompt_tokens, 2, c.seed + 7)), 2);
  const int32_t short_prompt = std::min(c.prompt_tokens, 8);
  const int32_t short_output = std::min(c.generated_tokens, 4);
  for (int32_t b : c.batch_sizes)
    check_round(run_round(engine.runner(), make_requests(tok, c, b, short_prompt, short_output, c.seed + 11)), short_output);
}

void validate(const Runner& runner, const BenchConfig& c) {
  if (c.prompt_tokens < 1) fail(ErrorCode::InvalidArgument, "benchmark prompt_tokens must be >= 1, not ", c.prompt_tokens);
  if (c.generated_tokens < 1)
    fail(ErrorCode::InvalidArgument, "benchmark generated_tokens must be >= 1, not ", c.generated_tokens);
  if (c.repetitions < 1) fail(ErrorCode::InvalidArgument, "benchmark repetitions must be >= 1, not ", c.repetitions);
  if (c.batch_sizes.empty()) fail(ErrorCode::InvalidArgument, "benchmark needs at least one batch size");
  const RunnerOptions& ro = runner.options();
  for (int32_t b : c.batch_sizes) {
    if (b < 1) fail(ErrorCode::InvalidArgument, "benchmark batch size must be >= 1, not ", b);
    if (b > ro.max_sessions || b > ro.max_waiting)
      fail(ErrorCode::InvalidArgument, "batch size ", b, " exceeds the runner's max_sessions (", ro.max_sessions,
           ") or max_waiting (", ro.max_waiting, "): all generations of a batch must run at once");
  }
  if (int64_t{c.prompt_tokens} + c.generated_tokens > ro.context_length)
    fail(ErrorCode::LimitExceeded, "prompt_tokens + generated_tokens = ", int64_t{c.prompt_tokens} + c.generated_tokens,
         " exceed the context length ", ro.context_length);
}

BenchRound measure(const Trace& trace, int32_t prompt_tokens, std::vector<double>& ttft, std::vector<double>& itl) {
  Clock::time_point prefill_end = trace.start, last = trace.start;
  for (const auto& times : trace.token_times) {
    prefill_end = std::max(prefill_end, times.front());
    last = std::max(last, times.back());
    ttft.push_back(ms_between(trace.start, times.front()));
    for (size_t t = 1; t < times.size(); ++t) itl.push_back(ms_between(times[t - 1], times[t]));
  }
  BenchRound round;
  round.prefill_ms = ms_between(trace.start, prefill_end);
  round.decode_ms = ms_between(prefill_end, last);
  for (const auto& times : trace.token_times)
    round.decode_tokens += std::count_if(times.begin(), times.end(), [&](Clock::time_point t) { return t > prefill_end; });
  const auto batch_prompt = static_cast<double>(prompt_tokens) * static_cast<double>(trace.token_times.size());
  round.prompt_tok_s = round.prefill_ms > 0 ? batch_prompt / (round.prefill_ms / 1000.0) : 0.0;
  round.generation_tok_s =
      round.decode_ms > 0 ? static_cast<double>(round.decode_tokens) / (round.decode_ms / 1000.0) : 0.0;
  return round;
}

BenchPoint run_point(Engine& engine, const BenchConfig& c, int32_t batch) {
  Runner& runner = engine.runner();
  BenchPoint point;
  point.batch = batch;
  point.prompt_tokens = int64_t{batch} * c.prompt_tokens;
  point.generated_tokens = int64_t{batch} * c.generated_tokens;
  std::vector<double> ttft, itl;
  double prefill_ms = 0, decode_ms = 0;
  int64_t decode_tokens = 0;
  runner.wait_idle();
  const EngineMetrics before = runner.metrics();
  for (int32_t rep = 0; rep < c.repetitions; ++rep) {
    const uint64_t seed = c.seed + static_cast<uint64_t>(batch) * 7919 + static_cast<uint64_t>(rep) * 104729;
    const Trace trace =
        run_round(runner, make_requests(engine.tokenizer(), c, batch, c.prompt_tokens, c.generated_tokens, seed));
    check_round(trace, c.generated_tokens);
    point.rounds.push_back(measure(trace, c.prompt_tokens, ttft, itl));
    prefill_ms += point.rounds.back().prefill_ms;
    decode_ms += point.rounds.back().decode_ms;
    decode_tokens += point.rounds.back().decode_tokens;
  }
  runner.wait_idle();  // the engine's counters settle after the last callback
  const EngineMetrics after = runner.metrics();
  point.steps = after.steps - before.steps;
  point.preemptions = after.preemptions - before.preemptions;
  point.decode_host = after.decode_host.since(before.decode_host);
  const int64_t gaps = after.decode_gaps - before.decode_gaps;
  if (gaps > 0)
    point.decode_gap_us = (after.decode_gap_seconds - before.decode_gap_seconds) * 1e6 / static_cast<double>(gaps);
  const double prompt_total = static_cast<double>(point.prompt_tokens) * c.repetitions;
  point.prompt_tok_s = prefill_ms > 0 ? prompt_total / (prefill_ms / 1000.0) : 0.0;
  point.generation_tok_s = decode_ms > 0 ? static_cast<double>(decode_tokens) / (decode_ms / 1000.0) : 0.0;
  point.ttft = latency_stats(std::move(ttft));
  point.itl = latency_stats(std::move(itl));
  return point;
}

}  // namespace

std::vector<int32_t> synthetic_prompt(const tokenizer::Tokenizer& tokenizer, int32_t length, uint64_t seed) {
  return draw_prompt(tokenizer, prompt_candidates(tokenizer), length, seed);
}

BenchResult run_benchmark(Engine& engine, const BenchConfig& config) {
  validate(engine.runner(), config);
  BenchResult result;
  result.config = config;
  if (config.warmup) {
    const auto start = Clock::now();
    warm_up(engine, config);
    result.warmup_ms = ms_between(start, Clock::now());
    log_info("bench: warm-up took ", static_cast<int64_t>(result.warmup_ms), " ms");
  }
  for (int32_t batch : config.batch_sizes) {
    result.points.push_back(run_point(engine, config, batch));
    const BenchPoint& p = result.points.back();
    log_info("bench: batch ", batch, ": prompt ", static_cast<int64_t>(p.prompt_tok_s), " tok/s, generation ",
             static_cast<int64_t>(p.generation_tok_s), " tok/s");
  }
  return result;
}

double weight_stream_gb_s(const BenchPoint& point, size_t decode_weight_bytes) {
  if (point.batch <= 0) return 0;
  return point.generation_tok_s / point.batch * static_cast<double>(decode_weight_bytes) / 1e9;
}

}  // namespace cellm::batching
