#pragma once
// A flat open-addressing map from 64-bit keys to 64-bit values, for the hot lookups of
// tokenization (merge ranks keyed by a pair of ids, trie edges keyed by node and byte).
#include <bit>
#include <cstdint>
#include <vector>

namespace cellm::tokenizer {

class IntMap {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a valid key

  void reserve(size_t n) {
    if (n * 2 > slots_.size()) rehash(std::bit_ceil(n * 2 + 2));
  }
  size_t size() const { return size_; }

  void insert_or_assign(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(std::bit_ceil((size_ + 1) * 4));
    Slot& slot = slots_[slot_of(key)];
    if (slot.key == kEmpty) {
      slot.key = key;
      ++size_;
    }
    slot.value = value;
  }

  const uint64_t* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = slots_[slot_of(key)];
    return slot.key == key ? &slot.value : nullptr;
  }

 private:
  static uint64_t mix(uint64_t x) {  // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  // Key and value side by side: a lookup touches one cache line.
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t value = 0;
  };
  size_t slot_of(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    size_t slot = mix(key) & mask;
    while (slots_[slot].key != kEmpty && slots_[slot].key != key) slot = (slot + 1) & mask;
    return slot;
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    size_ = 0;
    for (const Slot& s : old)
      if (s.key != kEmpty) insert_or_assign(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace cellm::tokenizer
