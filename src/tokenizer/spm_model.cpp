#include "tokenizer/spm_model.h"

#include <algorithm>

#include "tokenizer/merge_loop.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace cellm::tokenizer {
namespace {

constexpr size_t kMostCrossSpaceTokens = 64;                // beyond this, checking costs more than splitting saves

struct Symbol {
  uint32_t begin, length;  // bytes of the text; length 0 once merged away
  int32_t prev, next;
};

struct Candidate {
  float score;
  int32_t left, right;
  uint32_t length;  // of the merged text, to spot candidates made stale by other merges
  // Heap order: the highest score on top, then the leftmost.
  bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
};

}  // namespace

struct SpmModel::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

std::string escape_spaces(std::string_view text, bool add_prefix) {
  std::string out;
  out.reserve(text.size() + 8);
  if (add_prefix) out += kVisibleSpace;
  for (char c : text) {
    if (c == ' ') out += kVisibleSpace;
    else out += c;
  }
  return out;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kVisibleSpace.size(), kVisibleSpace) == 0) {
      out += ' ';
      pos += kVisibleSpace.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

SpmModel::SpmModel(const Vocab& vocab) : vocab_(vocab) {
  for (size_t id = 0; id < vocab.size(); ++id) {
    const std::string_view t = vocab.texts[static_cast<int32_t>(id)];
    if (t.size() > kVisibleSpace.size() && t.find(kVisibleSpace, 1) != std::string_view::npos)
      cross_space_tokens_.emplace_back(t);
  }
  split_at_spaces_ = cross_space_tokens_.size() <= kMostCrossSpaceTokens;
}

bool SpmModel::may_merge_across_spaces(std::string_view escaped) const {
  return std::any_of(cross_space_tokens_.begin(), cross_space_tokens_.end(),
                     [&](const std::string& t) { return escaped.find(t) != std::string_view::npos; });
}

// A merged symbol is a substring of the text that is a token. Unless the text contains a token
// with a space inside, no symbol can span a space, so the words between spaces merge
// independently: encoding them one by one (and each distinct word once) gives the same tokens.
void SpmModel::encode(std::string_view escaped, std::vector<int32_t>& out) const {
  Scratch scratch;
  if (!split_at_spaces_ || may_merge_across_spaces(escaped)) {
    encode_segment(escaped, scratch, out);
    return;
  }
  WordCache cache(escaped.size());
  const auto encode_one = [&](std::string_view word, std::vector<int32_t>& ids) { encode_segment(word, scratch, ids); };
  size_t begin = 0;
  while (begin < escaped.size()) {
    size_t end = escaped.find(kVisibleSpace, begin + 1);
    if (end == std::string_view::npos) end = escaped.size();
    cache.append(escaped.substr(begin, end - begin), out, encode_one);
    begin = end;
  }
}

void SpmModel::encode_segment(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const {
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::max<size_t>(1, utf8::sequence_length(text, pos));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(n), index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += n;
  }
  if (symbols.empty()) return;

  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const int32_t id = vocab_.texts.find(text.substr(symbols[left].begin, length));
    if (id == kNoToken) return;
    heap.push_back({vocab_.scores[id], left, right, length});
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));

  run_merges(
      symbols, heap,
      [&](const Candidate& c) {  // both sides unchanged since the candidate was queued
        const Symbol& l = symbols[c.left];
        const Symbol& r = symbols[c.right];
        return l.length != 0 && r.length != 0 && l.next == c.right && l.length + r.length == c.length;
      },
      [](const Candidate& c, Symbol& left, Symbol& right) {
        left.length = c.length;
        right.length = 0;
      },
      consider);

  for (int32_t i = 0; i >= 0; i = symbols[i].next) emit_symbol(text.substr(symbols[i].begin, symbols[i].length), out);
}

void SpmModel::emit_symbol(std::string_view text, std::vector<int32_t>& out) const {
  const int32_t id = vocab_.texts.find(text);
  if (id != kNoToken) {
    out.push_back(id);
    return;
  }
  for (char c : text) {
    const int32_t byte = vocab_.byte_tokens[static_cast<uint8_t>(c)];
    if (byte != kNoToken) out.push_back(byte);
    else if (vocab_.unk != kNoToken) out.push_back(vocab_.unk);
  }
}

}  // namespace cellm::tokenizer
