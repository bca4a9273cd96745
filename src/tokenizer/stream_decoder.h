#pragma once
// Turns generated tokens into text as they arrive. A token may end inside a UTF-8 character
// (byte-fallback tokens, byte-level pieces of CJK or emoji): those bytes are held back until
// the character is complete, so every chunk handed out is whole UTF-8, and the chunks joined
// equal Tokenizer::decode of the same ids. Bytes that no continuation could make valid are
// passed through as they are, since holding them would never end.
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace cellm::tokenizer {

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {})
      : tokenizer_(&tokenizer), options_(options) {}

  // The text that is complete after token `id` (often empty while a character is pending).
  std::string push(int32_t id);
  // Whatever is still held back (an unfinished character at the end of generation).
  std::string finish();
  // Bytes held back now.
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;  // a pointer, so that decoders can be reassigned
  DecodeOptions options_;
  DecodeState state_;
  std::string pending_;
};

}  // namespace cellm::tokenizer
