#pragma once
// One generation inside the engine. Its tokens are the prompt followed by what it generated;
// tokens [0, cached) are in the cache as sequence `seq`. Whatever is not cached yet is pending
// and goes into the next forwards: a prefill slice when several tokens are pending, a decode
// row when one is. Preemption frees the sequence and sets cached back to 0, so the prompt and
// the output so far are recomputed on readmission, and generation resumes where it stopped.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "batching/generation.h"
#include "batching/sampler.h"
#include "batching/stop_matcher.h"
#include "kv/cell_cache.h"
#include "tokenizer/stream_decoder.h"

namespace cellm::batching {

using Clock = std::chrono::steady_clock;

struct Session {
  Session(GenerationId id, GenerationRequest request, GenerationCallbacks callbacks,
          const tokenizer::Tokenizer& tokenizer);

  GenerationId id;
  GenerationRequest request;
  GenerationCallbacks callbacks;
  kv::SeqId seq = -1;  // -1 while not in the cache
  std::vector<int32_t> tokens;
  int32_t prompt_len = 0;
  int32_t cached = 0;
  int64_t admitted_order = -1;  // larger = admitted later (the youngest is preempted first)
  bool finished = false;

  Sampler sampler;
  tokenizer::StreamDecoder decoder;
  StopMatcher stop;
  std::string text;

  Clock::time_point submitted;
  Clock::time_point first_scheduled{};
  Clock::time_point last_token{};
  double first_token_ms = 0;
  double itl_sum_ms = 0;
  double itl_max_ms = 0;
  int32_t preemptions = 0;
  int32_t reused = 0;  // prompt tokens taken from a parked sequence
  int32_t prefill_steps = 0;
  int32_t prefill_steps_beside_decodes = 0;
  bool scheduled_once = false;

  int32_t pending() const { return static_cast<int32_t>(tokens.size()) - cached; }
  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  bool in_cache() const { return seq >= 0; }
};

}  // namespace cellm::batching
