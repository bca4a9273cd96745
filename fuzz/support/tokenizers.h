#pragma once
// The tokenizers the fuzz targets drive, loaded once per process: those of the default models
// (models/, or $CELLM_MODELS_DIR) and the micro model's byte-level one. A missing default
// model is skipped with a message, unless CELLM_REQUIRE_MODELS is set (as CI does), where it
// aborts: a replay that silently drops the real vocabularies proves little.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/file.h"
#include "tokenizer/tokenizer.h"

namespace cellm::fuzz {

struct FuzzTokenizer {
  std::string name;
  std::vector<uint8_t> bytes;  // the GGUF, when it is not mapped from models/
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

// Never empty: the micro model's tokenizer is always last.
const std::vector<FuzzTokenizer>& fuzz_tokenizers();
// The tokenizer an input's selector byte picks (modulo their number).
const tokenizer::Tokenizer& pick_tokenizer(uint8_t selector);

// Encodes `text` (no BOS/EOS) and checks what any encoding must give: ids inside the
// vocabulary that decode back to the text, as far as the vocabulary can hold it
// (tests/tokenizer/round_trip.h; special-token text decodes to itself, so this holds with
// parse_special too).
std::vector<int32_t> encode_checked(const tokenizer::Tokenizer& tok, std::string_view text, bool parse_special);

// The default model files (models/ or $CELLM_MODELS_DIR), present or not.
std::vector<std::string> default_model_paths();
bool models_required();

}  // namespace cellm::fuzz
