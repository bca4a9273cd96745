#pragma once
// Plans one forward from the running sessions (DESIGN.md §6): decode first, every session with
// one pending token contributes a row; the rest of the token budget goes to prefill slices of
// sessions with several pending tokens, shared round-robin. A session whose last pending token
// is in the step gets a logit row.
#include <cstdint>
#include <span>
#include <vector>

#include "batching/session.h"

namespace cellm::batching {

struct PlannedSlice {
  Session* session = nullptr;
  int32_t count = 0;  // tokens [session->cached, session->cached + count)
};

struct StepPlan {
  std::vector<PlannedSlice> slices;  // decode rows first, then prefill slices
  int32_t tokens = 0;
  int32_t decode_rows = 0;
};

class Scheduler {
 public:
  explicit Scheduler(int32_t max_step_tokens) : max_step_tokens_(max_step_tokens) {}

  // `running` in admission order; every session has pending() > 0.
  StepPlan plan(std::span<Session* const> running);
  // Drops prefill slices from the end of the plan (newest first) until `fits` accepts it; the
  // decode rows are kept. Returns false if even the decode rows alone do not fit.
  template <typename Fits>
  bool trim_to_fit(StepPlan& plan, Fits&& fits);
  int32_t max_step_tokens() const { return max_step_tokens_; }

 private:
  int32_t max_step_tokens_;
  size_t cursor_ = 0;         // round-robin start among prefilling sessions
  size_t decode_cursor_ = 0;  // ... among decoding sessions, when they exceed the budget
};

template <typename Fits>
bool Scheduler::trim_to_fit(StepPlan& plan, Fits&& fits) {
  while (!fits(plan)) {
    if (plan.slices.size() <= static_cast<size_t>(plan.decode_rows)) return false;
    plan.tokens -= plan.slices.back().count;
    plan.slices.pop_back();
  }
  return true;
}

}  // namespace cellm::batching
