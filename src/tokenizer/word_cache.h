#pragma once
// Remembers the tokens of each word for the rest of one encode() call. Long texts repeat their
// words, and merging is dominated by lookups in tables of megabytes, so a repeated word costs
// one hash of its bytes instead. Short texts skip it (the map would cost more than it saves).
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cellm::tokenizer {

class WordCache {
 public:
  static constexpr size_t kWorthItFromBytes = 2048;  // of the whole text
  static constexpr size_t kLongestWord = 32;         // longer words rarely repeat

  explicit WordCache(size_t text_bytes) : enabled_(text_bytes >= kWorthItFromBytes) {}

  // Appends the tokens of `word` to `out`; `encode(word, out)` computes them the first time.
  // `word` must stay valid as long as the cache (it points into the text being encoded).
  template <typename Encode>
  void append(std::string_view word, std::vector<int32_t>& out, Encode&& encode) {
    if (!enabled_ || word.size() > kLongestWord) {
      encode(word, out);
      return;
    }
    const auto [it, fresh] = spans_.try_emplace(word);
    if (!fresh) {
      const auto first = ids_.begin() + it->second.first;
      out.insert(out.end(), first, first + it->second.second);
      return;
    }
    const size_t before = out.size();
    encode(word, out);
    it->second = {static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(out.size() - before)};
    ids_.insert(ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  }

 private:
  bool enabled_;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> spans_;  // word -> span of ids_
  std::vector<int32_t> ids_;
};

}  // namespace cellm::tokenizer
