#include "tokenizer/utf8.h"

#include <cstdint>

namespace cellm::tokenizer::utf8 {
namespace {

// Total length announced by a lead byte, 0 for bytes that cannot start a sequence.
size_t announced_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// The second byte's range is narrower than the generic 80..BF for some leads: that is what
// rules out overlong forms, surrogates and values above U+10FFFF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Number of bytes from text[pos] (at most `limit`) that agree with a well-formed sequence.
size_t matching_prefix(std::string_view text, size_t pos, size_t limit) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  size_t n = 1;
  while (n < limit && pos + n < text.size()) {
    const auto b = static_cast<uint8_t>(text[pos + n]);
    if (n == 1 ? !second_byte_ok(lead, b) : !is_continuation(b)) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t sequence_length(std::string_view text, size_t pos) {
  const size_t need = announced_length(static_cast<uint8_t>(text[pos]));
  if (need <= 1) return need;
  return matching_prefix(text, pos, need) == need ? need : 0;
}

bool is_valid(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = sequence_length(text, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

size_t incomplete_tail(std::string_view bytes) {
  const size_t size = bytes.size();
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    const size_t pos = size - back;
    const auto b = static_cast<uint8_t>(bytes[pos]);
    if (is_continuation(b)) continue;
    const size_t need = announced_length(b);
    if (need > back && matching_prefix(bytes, pos, need) == back) return back;
    return 0;
  }
  return 0;
}

char32_t decode_at(std::string_view text, size_t pos, size_t length) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (length == 1) return b0;
  char32_t cp = b0 & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace cellm::tokenizer::utf8
