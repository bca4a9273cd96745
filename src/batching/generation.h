#pragma once
// What callers submit to the runner and what they get back.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "batching/sampler.h"

namespace cellm::batching {

using GenerationId = uint64_t;

enum class FinishReason {
  Stop,       // a stop token or stop string
  Length,     // max_tokens, or the session's context limit
  Cancelled,  // cancel() or the runner shutting down
  Failed,     // an error (the message says which)
};
const char* finish_reason_name(FinishReason reason);

struct GenerationRequest {
  std::vector<int32_t> prompt;             // token ids, template already applied
  SamplingParams sampling;
  int32_t max_tokens = 256;                // new tokens at most
  std::vector<int32_t> stop_tokens;        // besides the tokenizer's end-of-generation tokens
  bool ignore_eos = false;                 // run to max_tokens (benchmarks)
  std::vector<std::string> stop_strings;   // the text stops before the first match
  std::string tag;                         // caller's label, echoed in reports
  // Conversation reuse: with keep_cache, the generation's cells stay in the cache after it
  // ends (parked under its id) until release() or memory pressure; a later request with
  // resume_from = that id reuses the cached prefix its prompt shares with them.
  bool keep_cache = false;
  uint64_t resume_from = 0;
};

struct GenerationTimings {
  double queue_ms = 0;      // submit -> first scheduled
  double ttft_ms = 0;       // submit -> first token
  double total_ms = 0;      // submit -> finish
  double mean_itl_ms = 0;   // mean gap between consecutive tokens
  double max_itl_ms = 0;
  int32_t preemptions = 0;  // times its cells were taken back and recomputed later
  int32_t prefill_steps = 0;  // forwards that carried a slice of its prompt
  int32_t prefill_steps_beside_decodes = 0;  // ... of which also held other generations' decode rows
};

struct GenerationResult {
  GenerationId id = 0;
  std::string tag;
  FinishReason finish_reason = FinishReason::Stop;
  std::string error;  // when Failed
  std::string text;
  std::vector<int32_t> tokens;  // generated tokens, stop token excluded
  int32_t prompt_tokens = 0;
  int32_t reused_prompt_tokens = 0;  // prompt tokens found in the cache (resume_from)
  uint64_t seed = 0;
  GenerationTimings timings;
};

// Callbacks run on the engine thread: keep them short (hand the data to another thread).
struct GenerationCallbacks {
  // A new token and the text it completes (may be empty while UTF-8 or a stop string is
  // pending). At the end, text still held back arrives with token -1. The texts concatenated
  // equal GenerationResult::text.
  std::function<void(GenerationId, int32_t token, const std::string& text)> on_token;
  std::function<void(const GenerationResult&)> on_finish;
};

}  // namespace cellm::batching
