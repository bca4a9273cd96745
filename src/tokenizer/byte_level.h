#pragma once
// The byte-level alphabet of GPT-2 style BPE vocabularies: every byte is spelled as one
// printable code point (printable Latin-1 bytes as themselves, the rest shifted to U+0100 and
// up), so token texts never contain raw spaces or control bytes ("Ġ" is a space).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cellm::tokenizer::byte_level {

// The code point that spells byte `b`.
char32_t spelling_of(uint8_t b);

// The byte spelled by code point `cp`, or -1 when `cp` is not in the alphabet.
int byte_of(char32_t cp);

// Raw bytes -> their spelling (UTF-8 text).
std::string spell(std::string_view raw);

// Spelled text -> raw bytes; nullopt when `spelled` holds a character outside the alphabet.
std::optional<std::string> unspell(std::string_view spelled);

}  // namespace cellm::tokenizer::byte_level
