#include "tokenizer/vocab.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "gguf/file.h"

namespace cellm::tokenizer {
namespace {

// Texts that end a turn in the chat formats we know; a control token spelled like this stops
// generation even when the file names it nowhere (Gemma's <end_of_turn> is such a case).
constexpr const char* kEndOfTurnTexts[] = {"<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<EOT>",
                                           "<|endoftext|>", "<|end_of_text|>", "<|return|>"};

int32_t optional_id(const gguf::File& file, const std::string& key, size_t vocab_size) {
  const auto value = file.get_uint_or(key);
  if (!value) return kNoToken;
  if (*value >= vocab_size)
    fail(ErrorCode::Format, "GGUF '", file.name(), "': ", key, " = ", *value, " is outside the vocabulary of ",
         vocab_size, " tokens");
  return static_cast<int32_t>(*value);
}

std::vector<TokenType> read_types(const gguf::File& file, size_t n) {
  std::vector<TokenType> types(n, TokenType::Normal);
  if (!file.has("tokenizer.ggml.token_type")) return types;
  const gguf::Array& a = file.get_array("tokenizer.ggml.token_type");
  if (a.size() != n || a.ints.size() != n)
    fail(ErrorCode::Format, "GGUF '", file.name(), "': tokenizer.ggml.token_type has ", a.size(),
         " integer entries for ", n, " tokens");
  for (size_t i = 0; i < n; ++i) {
    const int64_t t = a.ints[i];
    if (t < 0 || t > static_cast<int64_t>(TokenType::Byte))
      fail(ErrorCode::Format, "GGUF '", file.name(), "': tokenizer.ggml.token_type[", i, "] = ", t,
           " is not a token type (0..6)");
    types[i] = static_cast<TokenType>(t);
  }
  return types;
}

std::vector<float> read_scores(const gguf::File& file, size_t n) {
  if (!file.has("tokenizer.ggml.scores")) return std::vector<float>(n, 0.0f);
  std::vector<float> scores = file.get_float_array("tokenizer.ggml.scores");
  if (scores.size() != n)
    fail(ErrorCode::Format, "GGUF '", file.name(), "': tokenizer.ggml.scores has ", scores.size(), " entries for ",
         n, " tokens");
  return scores;
}

void find_byte_tokens(Vocab& v) {
  v.byte_tokens.fill(kNoToken);
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.byte_tokens[b] = v.texts.find(name);
  }
}

void find_end_of_generation(Vocab& v, const gguf::File& file) {
  std::vector<int32_t>& eog = v.end_of_generation;
  if (v.eos != kNoToken) eog.push_back(v.eos);
  if (v.eot != kNoToken) eog.push_back(v.eot);
  const int32_t eom = optional_id(file, "tokenizer.ggml.eom_token_id", v.size());
  if (eom != kNoToken) eog.push_back(eom);
  for (const char* text : kEndOfTurnTexts) {
    const int32_t id = v.texts.find(text);
    if (id == kNoToken || v.types[id] == TokenType::Normal) continue;
    eog.push_back(id);
    // The first end-of-turn marker in kEndOfTurnTexts' order is the EOT when the file names none.
    if (v.eot == kNoToken && std::string_view(text) != "<|endoftext|>" && std::string_view(text) != "<|end_of_text|>")
      v.eot = id;
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::File& file) {
  Vocab v;
  v.model = file.get_string("tokenizer.ggml.model");
  if (v.model == "gpt2") {
    v.kind = VocabKind::ByteLevelBpe;
  } else if (v.model == "llama") {
    v.kind = VocabKind::SentencePiece;
  } else {
    fail(ErrorCode::Unsupported, "GGUF '", file.name(), "': tokenizer.ggml.model '", v.model,
         "' is not supported (known: gpt2 = byte-level BPE, llama = SentencePiece BPE)");
  }
  const std::string* pre = file.find_string("tokenizer.ggml.pre");
  v.pre = pre ? *pre : "default";

  const auto& tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) fail(ErrorCode::Format, "GGUF '", file.name(), "': tokenizer.ggml.tokens is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail(ErrorCode::Format, "GGUF '", file.name(), "': tokenizer.ggml.tokens has ", tokens.size(), " entries");
  v.texts = TokenTexts(tokens);
  v.types = read_types(file, tokens.size());
  v.scores = read_scores(file, tokens.size());

  v.bos = optional_id(file, "tokenizer.ggml.bos_token_id", tokens.size());
  v.eos = optional_id(file, "tokenizer.ggml.eos_token_id", tokens.size());
  v.eot = optional_id(file, "tokenizer.ggml.eot_token_id", tokens.size());
  v.pad = optional_id(file, "tokenizer.ggml.padding_token_id", tokens.size());
  v.unk = optional_id(file, "tokenizer.ggml.unknown_token_id", tokens.size());

  // llama.cpp's defaults: SentencePiece vocabularies add BOS and a space prefix unless told otherwise.
  const bool spm = v.kind == VocabKind::SentencePiece;
  v.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token").value_or(spm);
  v.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix").value_or(spm);

  find_byte_tokens(v);
  find_end_of_generation(v, file);
  return v;
}

}  // namespace cellm::tokenizer
