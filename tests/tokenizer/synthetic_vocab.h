#pragma once
// Tiny tokenizers written to an in-memory GGUF, so the algorithms are tested on vocabularies
// whose every merge and score the test chooses.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/file.h"
#include "gguf/writer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace cellm::test {

struct SyntheticTokenizer {
  std::vector<uint8_t> bytes;  // the GGUF image, kept alive for the parsed file
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<tokenizer::Tokenizer> tok;
};

inline SyntheticTokenizer make_tokenizer(const std::function<void(gguf::Writer&)>& fill) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  fill(w);
  SyntheticTokenizer t;
  t.bytes = w.to_bytes();
  t.file = gguf::File::parse(t.bytes, "synthetic.gguf");
  t.tok = tokenizer::Tokenizer::from_gguf(*t.file);
  return t;
}

// The 256 byte-level single-byte tokens, id = byte value.
inline std::vector<std::string> byte_level_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    tokenizer::utf8::append(s, tokenizer::byte_level::spelling_of(static_cast<uint8_t>(b)));
    tokens.push_back(s);
  }
  return tokens;
}

}  // namespace cellm::test
