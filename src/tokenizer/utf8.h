#pragma once
// UTF-8 validation at the granularity tokenizers need: one sequence at a time, and "is this
// tail the start of a character still to come?" for streaming output.
#include <cstddef>
#include <string>
#include <string_view>

namespace cellm::tokenizer::utf8 {

// Length (1..4) of the well-formed sequence starting at text[pos], or 0 when the bytes there
// are not one: stray continuation bytes, overlong forms, surrogates, code points above
// U+10FFFF and sequences cut short by the end of `text` are all refused.
size_t sequence_length(std::string_view text, size_t pos);

bool is_valid(std::string_view text);

// How many bytes at the end of `bytes` (0..3) form a proper prefix of a well-formed sequence,
// i.e. a character that more bytes could still complete.
size_t incomplete_tail(std::string_view bytes);

// The code point of the well-formed sequence at text[pos] (see sequence_length).
char32_t decode_at(std::string_view text, size_t pos, size_t length);

void append(std::string& out, char32_t code_point);

}  // namespace cellm::tokenizer::utf8
