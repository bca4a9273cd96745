#include "batching/scheduler.h"

#include <algorithm>

namespace cellm::batching {

StepPlan Scheduler::plan(std::span<Session* const> running) {
  StepPlan plan;
  std::vector<Session*> decoding, prefilling;
  for (Session* s : running) (s->pending() == 1 ? decoding : prefilling).push_back(s);
  // More decode rows than the budget: they take turns, starting one further along each step,
  // so no session waits for others to finish.
  const size_t d = decoding.size();
  const size_t d_start = d > static_cast<size_t>(max_step_tokens_) ? decode_cursor_++ % d : 0;
  for (size_t k = 0; k < d && plan.tokens < max_step_tokens_; ++k) {
    plan.slices.push_back({decoding[(d_start + k) % d], 1});
    ++plan.tokens;
    ++plan.decode_rows;
  }
  if (prefilling.empty()) return plan;
  // Round-robin: an equal share each, starting one further along every step, then whatever
  // budget is left to whoever still has tokens, in the same order.
  const size_t n = prefilling.size();
  const size_t start = cursor_ % n;
  cursor_ = start + 1;
  std::vector<int32_t> give(n, 0);
  int32_t budget = max_step_tokens_ - plan.tokens;
  const int32_t share = std::max<int32_t>(1, budget / static_cast<int32_t>(n));
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (size_t k = 0; k < n && budget > 0; ++k) {
      const size_t i = (start + k) % n;
      const int32_t room = prefilling[i]->pending() - give[i];
      const int32_t take = std::min({room, budget, pass == 0 ? share : budget});
      give[i] += take;
      budget -= take;
    }
  }
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (give[i] == 0) continue;
    plan.slices.push_back({prefilling[i], give[i]});
    plan.tokens += give[i];
  }
  return plan;
}

}  // namespace cellm::batching
