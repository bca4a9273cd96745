#pragma once
// Token texts with a text -> id lookup (open addressing over the ids, no per-token nodes).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/string_arena.h"

namespace cellm::tokenizer {

class TokenTexts {
 public:
  TokenTexts() = default;
  explicit TokenTexts(const std::vector<std::string>& texts);

  size_t size() const { return texts_.size(); }
  std::string_view operator[](int32_t id) const { return texts_[static_cast<size_t>(id)]; }

  // The id spelled `text`, or -1. When the vocabulary repeats a text the last id wins, as in
  // llama.cpp and the Hugging Face converters.
  int32_t find(std::string_view text) const;

 private:
  size_t slot_of(std::string_view text) const;

  StringArena texts_;
  std::vector<int32_t> slots_;  // -1 = empty; size is a power of two
  size_t mask_ = 0;
};

}  // namespace cellm::tokenizer
