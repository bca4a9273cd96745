#pragma once
// What decode(encode(s)) must give back: s itself, except where the vocabulary cannot hold it.
//  - SentencePiece spells a space as U+2581, so a U+2581 in the text comes back as a space.
//  - Byte-level BPE drops bytes the vocabulary has no token for (SmolLM2 lacks 21, e.g. 0x04).
#include <string>
#include <string_view>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace cellm::test {

inline std::string expected_round_trip(const tokenizer::Tokenizer& tok, std::string_view s) {
  if (tok.kind() == tokenizer::VocabKind::SentencePiece) {
    std::string out;
    size_t from = 0;
    for (size_t at; (at = s.find("\xE2\x96\x81", from)) != std::string_view::npos; from = at + 3)
      out.append(s.substr(from, at - from)).push_back(' ');
    return out.append(s.substr(from));
  }
  std::string out;
  for (char c : s) {
    std::string spelled;
    tokenizer::utf8::append(spelled, tokenizer::byte_level::spelling_of(static_cast<uint8_t>(c)));
    if (tok.find_token(spelled) != tokenizer::kNoToken) out += c;
  }
  return out;
}

}  // namespace cellm::test
