#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace cellm::tokenizer::utf8 {
namespace {

TEST(Utf8, SequenceLengthOfWellFormedCharacters) {
  EXPECT_EQ(sequence_length("a", 0), 1u);
  EXPECT_EQ(sequence_length("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(sequence_length("\xE2\x82\xAC", 0), 3u);      // €
  EXPECT_EQ(sequence_length("\xF0\x9F\x8E\x89", 0), 4u);  // 🎉
  EXPECT_EQ(sequence_length("\xF4\x8F\xBF\xBF", 0), 4u);  // U+10FFFF
}

TEST(Utf8, SequenceLengthRefusesMalformedBytes) {
  EXPECT_EQ(sequence_length("\x80", 0), 0u);              // stray continuation
  EXPECT_EQ(sequence_length("\xC0\x80", 0), 0u);          // overlong NUL
  EXPECT_EQ(sequence_length("\xE0\x80\x80", 0), 0u);      // overlong
  EXPECT_EQ(sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate U+D800
  EXPECT_EQ(sequence_length("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(sequence_length("\xF5\x80\x80\x80", 0), 0u);
  EXPECT_EQ(sequence_length("\xFF", 0), 0u);
  EXPECT_EQ(sequence_length("\xE2\x82", 0), 0u);  // cut short
  EXPECT_EQ(sequence_length("\xE2" "a", 0), 0u);
}

TEST(Utf8, IsValid) {
  EXPECT_TRUE(is_valid(""));
  EXPECT_TRUE(is_valid("h\xC3\xA9llo \xF0\x9F\x8E\x89"));
  EXPECT_FALSE(is_valid("h\xC3llo"));
  EXPECT_FALSE(is_valid("\xF0\x9F\x8E"));
}

TEST(Utf8, IncompleteTailHoldsOnlyCharactersMoreBytesCouldFinish) {
  EXPECT_EQ(incomplete_tail(""), 0u);
  EXPECT_EQ(incomplete_tail("abc"), 0u);
  EXPECT_EQ(incomplete_tail("a\xC3"), 1u);
  EXPECT_EQ(incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_tail("\xF0\x9F\x8E"), 3u);
  EXPECT_EQ(incomplete_tail("\xF0\x9F\x8E\x89"), 0u);  // complete
  EXPECT_EQ(incomplete_tail("a\xFF"), 0u);              // can never become valid
  EXPECT_EQ(incomplete_tail("a\x80"), 0u);              // continuation without a lead
  EXPECT_EQ(incomplete_tail("\xE0\x80"), 0u);           // overlong prefix: never valid
  EXPECT_EQ(incomplete_tail("\xED\xA0"), 0u);           // surrogate prefix
}

TEST(Utf8, AppendAndDecodeAreInverse) {
  for (char32_t cp : {0x41u, 0xE9u, 0x20ACu, 0x1F389u, 0x10FFFFu}) {
    std::string s;
    append(s, cp);
    ASSERT_EQ(sequence_length(s, 0), s.size());
    EXPECT_EQ(decode_at(s, 0, s.size()), cp);
  }
}

}  // namespace
}  // namespace cellm::tokenizer::utf8
