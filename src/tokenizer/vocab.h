#pragma once
// The vocabulary a GGUF file describes under tokenizer.ggml.*: token texts, types, scores,
// the special ids and flags. Missing optional keys get llama.cpp's defaults.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/token_texts.h"

namespace cellm::gguf {
class File;
}

namespace cellm::tokenizer {

// tokenizer.ggml.token_type values (llama.cpp's numbering, which the files use).
enum class TokenType : uint8_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,      // <bos>, <|im_end|>: matched in text only when special parsing is on
  UserDefined = 4,  // always matched whole in text ("\n\n", runs of spaces in Gemma)
  Unused = 5,
  Byte = 6,         // <0x41>: byte fallback of SentencePiece vocabularies
};

// tokenizer.ggml.model: "gpt2" is byte-level BPE with merges, "llama" is SentencePiece BPE
// with scores and byte fallback.
enum class VocabKind { ByteLevelBpe, SentencePiece };

inline constexpr int32_t kNoToken = -1;

struct Vocab {
  VocabKind kind = VocabKind::ByteLevelBpe;
  std::string model;  // tokenizer.ggml.model as written
  std::string pre;    // tokenizer.ggml.pre, "default" when absent
  TokenTexts texts;
  std::vector<TokenType> types;
  std::vector<float> scores;  // one per token (0 when the file has none)

  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, pad = kNoToken, unk = kNoToken;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::vector<int32_t> end_of_generation;  // sorted: EOS, EOT and other end-of-turn tokens
  std::array<int32_t, 256> byte_tokens{};  // SentencePiece <0xXX> ids, kNoToken where absent

  static Vocab from_gguf(const gguf::File& file);

  size_t size() const { return texts.size(); }
  bool is_special(int32_t id) const {  // rendered only on request, like llama.cpp's CONTROL|UNKNOWN
    return types[id] == TokenType::Control || types[id] == TokenType::Unknown;
  }
};

}  // namespace cellm::tokenizer
