#pragma once
// Text <-> token ids for a GGUF model, with the semantics of llama.cpp (which the engine's
// models were converted for) and, where they agree, of the Hugging Face tokenizer:
//
//   auto tok = Tokenizer::from_gguf(file);
//   std::vector<int32_t> ids = tok->encode(prompt, {.parse_special = true});  // BOS per file
//   std::string text = tok->decode(ids);
//
// Encoding: special-token text is cut out first (SpecialMatcher), the rest goes through the
// vocabulary's model (byte-level BPE or SentencePiece BPE). Decoding concatenates pieces, the
// bytes each token stands for. A Tokenizer is immutable after loading and safe to share
// between threads.
//
// Any bytes are accepted. Invalid UTF-8 is kept byte for byte (byte tokens, byte fallback),
// where llama.cpp would substitute U+FFFD; so decode(encode(s)) == s except for what the
// vocabulary cannot hold: a byte with no byte-level token is dropped (as Hugging Face and
// llama.cpp do), and SentencePiece reads a U+2581 in the text as the space it stands for.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/special_matcher.h"
#include "tokenizer/string_arena.h"
#include "tokenizer/vocab.h"

namespace cellm::gguf {
class File;
}

namespace cellm::tokenizer {

class BpeModel;
class SpmModel;

struct EncodeOptions {
  std::optional<bool> add_bos;  // unset: tokenizer.ggml.add_bos_token (and only if a BOS exists)
  std::optional<bool> add_eos;  // unset: tokenizer.ggml.add_eos_token
  // Match control-token text such as "<|im_start|>" in the input. On for rendered chat
  // templates; off for raw user text, where such text stays plain characters.
  bool parse_special = false;
};

struct DecodeOptions {
  bool skip_special = false;  // drop control tokens (<bos>, <|im_end|>) instead of writing their text
};

// Where decoding stands between two tokens; see Tokenizer::append_piece.
struct DecodeState {
  bool after_boundary = true;  // at the start, or right after a special / user-defined token
};

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Throws InvalidArgument for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // Appends the text of one token: the building block of decode() and StreamDecoder. When the
  // vocabulary adds a space prefix, the space that encode() put at the start of each run of
  // plain text is removed again here, so decode(encode(s)) == s.
  void append_piece(int32_t id, DecodeState& state, std::string& out, const DecodeOptions& options = {}) const;

  // The bytes token `id` stands for (may be part of a UTF-8 character; control tokens: their text).
  std::string_view piece(int32_t id) const;
  // The token as the vocabulary spells it ("Ġworld", "▁world", "<0x0A>").
  std::string_view token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  int32_t find_token(std::string_view text) const { return vocab_.texts.find(text); }  // kNoToken if none

  int32_t bos() const { return vocab_.bos; }  // kNoToken (-1) when the file names none
  int32_t eos() const { return vocab_.eos; }
  // End of turn: tokenizer.ggml.eot_token_id, else a known end-of-turn token (<|im_end|>,
  // <end_of_turn>, <|eot_id|>) found in the vocabulary; kNoToken when neither.
  int32_t eot() const { return vocab_.eot; }
  int32_t pad() const { return vocab_.pad; }
  int32_t unk() const { return vocab_.unk; }
  bool adds_bos() const { return vocab_.add_bos && vocab_.bos != kNoToken; }
  bool adds_eos() const { return vocab_.add_eos && vocab_.eos != kNoToken; }
  // EOS, EOT and every other end-of-turn token of the vocabulary: generation stops there.
  bool is_end_of_generation(int32_t id) const;
  std::span<const int32_t> end_of_generation() const { return vocab_.end_of_generation; }

  size_t vocab_size() const { return vocab_.size(); }
  VocabKind kind() const { return vocab_.kind; }
  const std::string& model_name() const { return vocab_.model; }  // tokenizer.ggml.model
  const std::string& pre_tokenizer() const { return vocab_.pre; }  // tokenizer.ggml.pre

 private:
  explicit Tokenizer(Vocab vocab);
  void check_id(int32_t id) const;
  void encode_plain(std::string_view text, bool after_boundary, std::vector<int32_t>& out) const;

  Vocab vocab_;
  StringArena pieces_;
  SpecialMatcher specials_;
  std::unique_ptr<BpeModel> bpe_;
  std::unique_ptr<SpmModel> spm_;
};

}  // namespace cellm::tokenizer
