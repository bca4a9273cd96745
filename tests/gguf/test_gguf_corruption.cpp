// Truncated and bit-flipped copies of the real models: every variant is either refused with a
// Format error or parses into a file whose every tensor lies inside the buffer. Run under
// AddressSanitizer/UndefinedBehaviorSanitizer (scripts/test does), any out-of-bounds read or
// undefined behaviour fails the run.
#include <gtest/gtest.h>

#include <random>

#include "common/test_models.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/file.h"

namespace cellm::gguf {
namespace {

// Parses, and on success checks what a loader relies on.
bool parse_is_clean(std::span<const uint8_t> bytes, std::string* error) {
  try {
    const auto f = File::parse(bytes, "variant");
    for (const auto& t : f->tensors()) {
      EXPECT_GE(t.data, bytes.data());
      EXPECT_LE(t.data + t.bytes, bytes.data() + bytes.size()) << t.name;
    }
    // Touch every metadata string array the way a tokenizer would.
    for (const auto& [key, value] : f->metadata()) (void)key, (void)value;
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format) << e.what();
    *error = e.what();
    return false;
  }
}

void run_variants(const std::string& path) {
  MappedFile original(path);
  const auto whole = original.bytes();
  const auto f = File::parse(whole, path);
  const uint64_t header_end = f->data_offset();

  // Truncations: 150 cut points spread over the header and the data. Every one must be refused
  // (a tensor's data always ends at or near the end of the file).
  std::mt19937_64 rng(1234);
  int refused = 0;
  std::string error;
  for (int i = 0; i < 150; ++i) {
    const uint64_t cut = i < 100 ? rng() % header_end : header_end + rng() % (whole.size() - header_end);
    if (!parse_is_clean(whole.first(cut), &error)) ++refused;
  }
  EXPECT_EQ(refused, 150) << "a truncated copy of " << path << " was accepted";

  // Bit flips in the header region (metadata and tensor infos), where they matter; a flip can
  // leave a valid file (in a string's text, say), which must then parse consistently.
  std::vector<uint8_t> copy(whole.begin(), whole.end());
  int flips_refused = 0;
  for (int i = 0; i < 300; ++i) {
    const uint64_t at = i < 60 ? rng() % 64 : rng() % header_end;  // the first bytes hold the counts
    const uint8_t bit = static_cast<uint8_t>(1u << (rng() % 8));
    copy[at] ^= bit;
    if (!parse_is_clean(copy, &error)) ++flips_refused;
    copy[at] ^= bit;
  }
  EXPECT_GT(flips_refused, 30) << "suspiciously few bit flips were refused";
  std::printf("%s: 150/150 truncations refused, %d/300 header bit flips refused (last error: %s)\n", path.c_str(),
              flips_refused, error.c_str());
}

TEST(GgufCorruption, SmolLM2Variants) {
  CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
  run_variants(path);
}

TEST(GgufCorruption, Gemma3Variants) {
  CELLM_REQUIRE_MODEL(path, test::kGemma3);
  run_variants(path);
}

}  // namespace
}  // namespace cellm::gguf
