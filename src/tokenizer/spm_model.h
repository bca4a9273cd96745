#pragma once
// SentencePiece BPE (tokenizer.ggml.model = llama, as in Llama 2 and Gemma): the text, spaces
// already escaped as U+2581, starts as one symbol per character; the adjacent pair whose
// concatenation is the token with the highest score merges first (leftmost on ties), until no
// pair forms a token. A character that is no token falls back to its <0xXX> byte tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace cellm::tokenizer {

class SpmModel {
 public:
  explicit SpmModel(const Vocab& vocab);

  // Appends the tokens of escaped text. A byte that is not valid UTF-8 is a symbol of its own
  // and so reaches byte fallback unchanged.
  void encode(std::string_view escaped, std::vector<int32_t>& out) const;

 private:
  struct Scratch;
  void encode_segment(std::string_view text, Scratch& scratch, std::vector<int32_t>& out) const;
  void emit_symbol(std::string_view text, std::vector<int32_t>& out) const;
  bool may_merge_across_spaces(std::string_view escaped) const;

  const Vocab& vocab_;
  // Tokens with U+2581 after their first character (Gemma has one: ">▁</"). Where none can
  // form, no merge crosses a space, and the text is encoded word by word (see encode()).
  std::vector<std::string> cross_space_tokens_;
  bool split_at_spaces_ = true;
};

// SentencePiece's visible space, U+2581 ("▁"), which stands for " " in its token texts.
inline constexpr std::string_view kVisibleSpace = "\xE2\x96\x81";

// " " -> "▁", with one more "▁" in front when `add_prefix`.
std::string escape_spaces(std::string_view text, bool add_prefix);
// "▁" -> " ".
std::string unescape_spaces(std::string_view text);

}  // namespace cellm::tokenizer
