#pragma once
// Finds special-token text inside a prompt. Control tokens (<|im_start|>, <start_of_turn>)
// match only when special parsing is on; user-defined tokens ("\n\n", Gemma's space runs and
// HTML tags) always match, as in llama.cpp and Hugging Face. Among tokens starting at the
// leftmost position the longest wins (the rule of Hugging Face's added-token matcher).
// llama.cpp instead places longer tokens first wherever they occur; the two differ only when
// a token's end overlaps another's start, which no special token of the default models does.
#include <bitset>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/int_map.h"

namespace cellm::tokenizer {

class SpecialMatcher {
 public:
  struct Match {
    size_t begin = 0, length = 0;
    int32_t id = -1;
  };

  // `always`: user-defined (matched whatever the mode); otherwise matched only with parse_special.
  void add(std::string_view text, int32_t id, bool always);

  // Leftmost-longest match in text[from..]; nullopt when there is none.
  std::optional<Match> find(std::string_view text, size_t from, bool parse_special) const;

  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    int32_t id = -1;
    bool always = false;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};  // a byte trie; node 0 is the root
  IntMap edges_;                     // (node << 8 | byte) -> child
  std::bitset<256> first_always_, first_any_;
};

}  // namespace cellm::tokenizer
