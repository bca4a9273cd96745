// Host time of one sampled token over a vocabulary the size of Gemma 3's (262,144 logits), for
// the sampling settings clients use: temperature alone (the OpenAI default: no cut), the
// llama.cpp chain (top-k 40, top-p 0.95, min-p 0.05), nucleus alone, and greedy for scale.
// Two kinds of logits: "peaked" as a language model's usually are (a bulk, and a few dozen
// tokens far above it), and "flat" (normal, sigma 3: top-p 0.95 then keeps ~24k tokens), the
// hard case for a nucleus. A decode step of Gemma 3 270M on two cores takes ~15 ms, so
// anything near a millisecond here shows in tokens per second.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "batching/sampler.h"
#include "core/thread_pool.h"

namespace {

using cellm::batching::Sampler;
using cellm::batching::SamplingParams;

std::vector<float> gemma_sized_logits(bool peaked) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, peaked ? 1.5f : 3.0f);
  std::vector<float> logits(262144);
  for (float& l : logits) l = normal(rng);
  if (peaked)
    for (size_t i = 0; i < logits.size(); i += logits.size() / 32) logits[i] += 12.0f;  // the plausible few
  return logits;
}

void run(benchmark::State& state, SamplingParams p) {
  static const std::vector<float> peaked = gemma_sized_logits(true), flat = gemma_sized_logits(false);
  const std::vector<float>& logits = state.range(0) ? peaked : flat;
  p.seed = 5;
  Sampler sampler(p);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(logits, {}));
  state.counters["vocab"] = static_cast<double>(logits.size());
}

void BM_Greedy(benchmark::State& state) { run(state, {}); }
void BM_TemperatureOnly(benchmark::State& state) { run(state, {.temperature = 1.0f}); }
void BM_TopP095(benchmark::State& state) { run(state, {.temperature = 0.8f, .top_p = 0.95f}); }
void BM_LlamaCppChain(benchmark::State& state) {
  run(state, {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f});
}

// A step of 16 sampled generations (the runner draws their tokens side by side, each from
// its own sampler): argument = threads. The runner uses the CPU backend's threads, or up to 8
// of its own when the kernels run on a GPU and the host cores wait.
void BM_StepOf16Rows(benchmark::State& state) {
  static const std::vector<float> logits = gemma_sized_logits(true);
  cellm::ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<Sampler> samplers;
  for (int i = 0; i < 16; ++i) samplers.emplace_back(SamplingParams{.temperature = 0.8f, .seed = static_cast<uint64_t>(i)});
  for (auto _ : state)
    pool.parallel_for(16, [&](int64_t k, int) { benchmark::DoNotOptimize(samplers[static_cast<size_t>(k)].sample(logits, {})); });
}
BENCHMARK(BM_StepOf16Rows)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Argument: 1 = peaked logits, 0 = flat.
BENCHMARK(BM_Greedy)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TemperatureOnly)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP095)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LlamaCppChain)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);

}  // namespace
