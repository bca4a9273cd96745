#pragma once
// Byte-level BPE (tokenizer.ggml.model = gpt2): text is cut into words by the pre-tokenizer,
// each word starts as one token per byte, and the adjacent pair with the best (lowest) merge
// rank is merged until no ranked pair is left; equal ranks merge leftmost first.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/int_map.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"

namespace cellm::tokenizer {

class BpeModel {
 public:
  // `merges` are "left right" in rank order (tokenizer.ggml.merges). A merge whose parts or
  // result are not tokens can never apply and is left out.
  BpeModel(const Vocab& vocab, const std::vector<std::string>& merges, PreTokenizer pre);

  // Appends the tokens of raw text (no special tokens in it). Bytes that are not valid UTF-8
  // are kept: each becomes its own word, i.e. its byte token, so nothing is lost - except
  // bytes the vocabulary has no token for, which are dropped.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  size_t merge_count() const { return merges_.size(); }

 private:
  struct Scratch;
  void encode_word(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;
  int32_t byte_token(uint8_t b) const;

  const Vocab& vocab_;
  PreTokenizer pre_;
  IntMap merges_;                      // (left << 32 | right) -> (rank << 32 | result)
  std::array<int32_t, 256> bytes_{};   // the token spelling each single byte
};

}  // namespace cellm::tokenizer
