#pragma once
// Which tokens a sampled draw may pick: top-k, then top-p (nucleus), then min-p, each on the
// softmax of the logits at temperature 1, as llama.cpp chains them. Every cut keeps a prefix
// of the tokens ranked best first, so only that prefix is ever put in order: the best
// candidates are partitioned out of the vocabulary in growing rounds and sorted, and the rest
// (most of a 262k-token vocabulary) is never sorted.
#include <cstdint>
#include <vector>

namespace cellm::batching {

struct TokenLogit {
  int32_t id;
  float logit;
};

// Ranking: higher logit first, the lower id among equal logits.
inline bool ranks_before(const TokenLogit& a, const TokenLogit& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Cuts `tokens` (every token once, any order; top_k 0, top_p 1 and min_p 0 mean off) down to
// the tokens the draw may pick. When a cut is on, they are left ranked best first; with none
// on, every token stays, in the order given.
void filter_tokens(std::vector<TokenLogit>& tokens, int32_t top_k, float top_p, float min_p);

}  // namespace cellm::batching
