#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace cellm::tokenizer::byte_level {
namespace {

bool spells_itself(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Alphabet {
  std::array<char32_t, 256> spelling{};
  std::array<int16_t, 512> byte{};  // every spelling is below U+0200
};

Alphabet build_alphabet() {
  Alphabet a;
  a.byte.fill(-1);
  char32_t next_shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = spells_itself(b) ? static_cast<char32_t>(b) : next_shifted++;
    a.spelling[b] = cp;
    a.byte[cp] = static_cast<int16_t>(b);
  }
  return a;
}

const Alphabet& alphabet() {
  static const Alphabet a = build_alphabet();
  return a;
}

}  // namespace

char32_t spelling_of(uint8_t b) { return alphabet().spelling[b]; }

int byte_of(char32_t cp) { return cp < alphabet().byte.size() ? alphabet().byte[cp] : -1; }

std::string spell(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) utf8::append(out, spelling_of(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> unspell(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (size_t pos = 0; pos < spelled.size();) {
    const size_t n = utf8::sequence_length(spelled, pos);
    if (n == 0) return std::nullopt;
    const int b = byte_of(utf8::decode_at(spelled, pos, n));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    pos += n;
  }
  return out;
}

}  // namespace cellm::tokenizer::byte_level
