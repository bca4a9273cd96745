#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace cellm::tokenizer {
namespace {

std::vector<std::string> split(const std::string& name, const std::string& text) {
  std::vector<std::string_view> pieces;
  PreTokenizer::by_name(name).split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2SplitsWordsContractionsAndWhitespace) {
  EXPECT_EQ(split("gpt2", "Hello world's  test"), (Pieces{"Hello", " world", "'s", " ", " test"}));
  EXPECT_EQ(split("gpt2", "x = 42;\n\n"), (Pieces{"x", " =", " 42", ";", "\n\n"}));
}

TEST(PreTokenizer, SmollmIsolatesEveryDigitFirst) {
  EXPECT_EQ(split("smollm", "abc 123"), (Pieces{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "x ²"), (Pieces{"x", " ", "²"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndIgnoresCaseInContractions) {
  EXPECT_EQ(split("llama3", "1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("llama3", "HELLO'S"), (Pieces{"HELLO", "'S"}));
  EXPECT_EQ(split("llama3", "\n\nfoo bar"), (Pieces{"\n\n", "foo", " bar"}));
  EXPECT_EQ(split("llama3", "(hi)"), (Pieces{"(hi", ")"}));
  EXPECT_TRUE(PreTokenizer::by_name("llama-bpe").ignore_merges());
}

TEST(PreTokenizer, Qwen2TakesDigitsOneByOne) {
  EXPECT_EQ(split("qwen2", "ab1234"), (Pieces{"ab", "1", "2", "3", "4"}));
  EXPECT_FALSE(PreTokenizer::by_name("qwen2").ignore_merges());
}

// U+0085 is whitespace to Unicode and to the reference tokenizers; PCRE2's \s lacks it.
TEST(PreTokenizer, NextLineCountsAsWhitespace) {
  EXPECT_EQ(split("gpt2", "a\u0085\u0085b"), (Pieces{"a", "\u0085", "\u0085", "b"}));
  EXPECT_EQ(with_unicode_whitespace(R"(\s+(?!\S)|[^\s\p{L}]|\\s)"),
            R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}]|\\s)");
}

TEST(PreTokenizer, PiecesTileHugeWhitespaceRuns) {
  const std::string text = std::string(1 << 20, ' ') + "x" + std::string(1 << 18, '\n');
  for (const char* name : {"gpt2", "llama3"}) {
    std::vector<std::string_view> pieces;
    PreTokenizer::by_name(name).split(text, pieces);
    std::string joined;
    for (auto p : pieces) joined += p;
    EXPECT_EQ(joined, text) << name;
  }
}

TEST(PreTokenizer, UnknownNameIsAnErrorListingTheKnownOnes) {
  try {
    PreTokenizer::by_name("no-such-pre");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no-such-pre"), std::string::npos);
    for (const char* known : {"smollm", "llama3", "qwen2", "gpt2", "default"})
      EXPECT_NE(msg.find(known), std::string::npos) << known;
  }
}

}  // namespace
}  // namespace cellm::tokenizer
