#include "tokenizer/special_matcher.h"

namespace cellm::tokenizer {

int32_t SpecialMatcher::child(int32_t node, uint8_t byte) const {
  const uint64_t* c = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return c ? static_cast<int32_t>(*c) : -1;
}

void SpecialMatcher::add(std::string_view text, int32_t id, bool always) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char ch : text) {
    const auto b = static_cast<uint8_t>(ch);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      edges_.insert_or_assign((static_cast<uint64_t>(node) << 8) | b, static_cast<uint64_t>(next));
    }
    node = next;
  }
  nodes_[node] = {id, always};  // a repeated text: the later id wins, as in the vocabulary index
  const auto first = static_cast<uint8_t>(text[0]);
  first_any_.set(first);
  if (always) first_always_.set(first);
}

std::optional<SpecialMatcher::Match> SpecialMatcher::find(std::string_view text, size_t from,
                                                          bool parse_special) const {
  const std::bitset<256>& starts = parse_special ? first_any_ : first_always_;
  if (starts.none()) return std::nullopt;
  for (size_t begin = from; begin < text.size(); ++begin) {
    if (!starts.test(static_cast<uint8_t>(text[begin]))) continue;
    Match best;
    int32_t node = 0;
    for (size_t i = begin; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const Node& n = nodes_[node];
      if (n.id >= 0 && (n.always || parse_special)) best = {begin, i + 1 - begin, n.id};
    }
    if (best.id >= 0) return best;
  }
  return std::nullopt;
}

}  // namespace cellm::tokenizer
