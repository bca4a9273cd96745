#include "tokenizer/token_texts.h"

#include <bit>

namespace cellm::tokenizer {
namespace {

uint64_t hash_text(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a: tokens are short, so a simple hash is enough
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h ^ (h >> 29);
}

}  // namespace

TokenTexts::TokenTexts(const std::vector<std::string>& texts) {
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  texts_.reserve(texts.size(), bytes);
  for (const auto& t : texts) texts_.push_back(t);

  // Load factor <= 1/2 keeps probe sequences short.
  slots_.assign(std::bit_ceil(texts.size() * 2 + 2), -1);
  mask_ = slots_.size() - 1;
  for (size_t id = 0; id < texts.size(); ++id) slots_[slot_of(texts[id])] = static_cast<int32_t>(id);
}

size_t TokenTexts::slot_of(std::string_view text) const {
  size_t slot = hash_text(text) & mask_;
  while (slots_[slot] >= 0 && texts_[static_cast<size_t>(slots_[slot])] != text) slot = (slot + 1) & mask_;
  return slot;
}

int32_t TokenTexts::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  return slots_[slot_of(text)];
}

}  // namespace cellm::tokenizer
