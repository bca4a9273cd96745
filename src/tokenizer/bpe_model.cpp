#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "core/log.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/merge_loop.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace cellm::tokenizer {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours still alive, -1 at the ends
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int32_t left, right;  // symbol positions
  int32_t left_id, right_id, result;
  // Heap order: the lowest rank on top, then the leftmost.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

}  // namespace

// Buffers reused for every word of one encode() call: words are short and many.
struct BpeModel::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

BpeModel::BpeModel(const Vocab& vocab, const std::vector<std::string>& merges, PreTokenizer pre)
    : vocab_(vocab), pre_(std::move(pre)) {
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8::append(spelled, byte_level::spelling_of(static_cast<uint8_t>(b)));
    bytes_[b] = vocab.texts.find(spelled);
  }
  merges_.reserve(merges.size());
  std::string joined;
  size_t skipped = 0;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view m = merges[rank];
    // Byte-level texts never hold a raw space, so the separator is the first space after the
    // first character (llama.cpp searches from index 1 too).
    const size_t sep = m.find(' ', 1);
    if (sep == std::string_view::npos) {
      ++skipped;
      continue;
    }
    const std::string_view left = m.substr(0, sep), right = m.substr(sep + 1);
    joined.assign(left).append(right);
    const int32_t l = vocab.texts.find(left), r = vocab.texts.find(right), result = vocab.texts.find(joined);
    if (l < 0 || r < 0 || result < 0) {
      ++skipped;
      continue;
    }
    const uint64_t key = pair_key(l, r);
    if (merges_.find(key)) continue;  // a repeated merge keeps its first (best) rank
    merges_.insert_or_assign(key, (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(result));
  }
  if (skipped > 0) log_debug("tokenizer: ", skipped, " of ", merges.size(), " merges name texts outside the vocabulary");
}

// A byte the vocabulary cannot spell (SmolLM2 lacks 21 of them, 0x04 among them) yields no
// token at all, as in Hugging Face and llama.cpp; <unk> would be wrong, being often an EOS.
int32_t BpeModel::byte_token(uint8_t b) const { return bytes_[b]; }

void BpeModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  Scratch scratch;
  WordCache cache(text.size());
  const auto encode_one = [&](std::string_view word, std::vector<int32_t>& ids) { encode_word(word, scratch, ids); };
  std::vector<std::string_view> words;
  size_t pos = 0;
  while (pos < text.size()) {
    // The regexes need valid UTF-8: split around invalid bytes and keep those as byte tokens.
    size_t end = pos;
    while (end < text.size()) {
      const size_t n = utf8::sequence_length(text, end);
      if (n == 0) break;
      end += n;
    }
    if (end > pos) {
      words.clear();
      pre_.split(text.substr(pos, end - pos), words);
      for (std::string_view w : words) cache.append(w, out, encode_one);
    }
    if (end < text.size()) {
      const int32_t id = byte_token(static_cast<uint8_t>(text[end]));
      if (id != kNoToken) out.push_back(id);
      ++end;
    }
    pos = end;
  }
}

void BpeModel::encode_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const {
  if (pre_.ignore_merges()) {
    const int32_t whole = vocab_.texts.find(byte_level::spell(word));
    if (whole != kNoToken) {
      out.push_back(whole);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_token(static_cast<uint8_t>(word[0]));
    if (id != kNoToken) out.push_back(id);
    return;
  }

  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i)
    symbols.push_back({byte_token(static_cast<uint8_t>(word[i])), i - 1, i + 1 < n ? i + 1 : -1, true});

  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id, r = symbols[right].id;
    if (l == kNoToken || r == kNoToken) return;
    const uint64_t* merge = merges_.find(pair_key(l, r));
    if (!merge) return;
    heap.push_back({static_cast<uint32_t>(*merge >> 32), left, right, l, r, static_cast<int32_t>(*merge & 0xFFFFFFFFu)});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  run_merges(
      symbols, heap,
      [&](const Candidate& c) {  // neither side has merged since the candidate was queued
        const Symbol& l = symbols[c.left];
        const Symbol& r = symbols[c.right];
        return l.alive && r.alive && l.next == c.right && l.id == c.left_id && r.id == c.right_id;
      },
      [](const Candidate& c, Symbol& left, Symbol& right) {
        left.id = c.result;
        right.alive = false;
      },
      consider);

  for (int32_t i = 0; i >= 0; i = symbols[i].next)
    if (symbols[i].id != kNoToken) out.push_back(symbols[i].id);
}

}  // namespace cellm::tokenizer
