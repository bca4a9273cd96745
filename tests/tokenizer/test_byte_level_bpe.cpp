// Byte-level BPE on a vocabulary small enough to know every merge.
#include <gtest/gtest.h>

#include "core/error.h"
#include "synthetic_vocab.h"
#include "tokenizer/stream_decoder.h"

namespace cellm::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

enum : int32_t { kHe = 256, kLl, kHell, kHello, kSpaceW, kEnd, kAa, kAb, kBc, kBos, kXyz };

test::SyntheticTokenizer make_bpe(const std::string& pre = "gpt2", bool with_merges = true) {
  return test::make_tokenizer([&](gguf::Writer& w) {
    auto tokens = test::byte_level_tokens();  // ids 0..255 = bytes
    for (const char* t : {"he", "ll", "hell", "hello", "\xC4\xA0w", "<|end|>", "aa", "ab", "bc", "<s>", "xyz"})
      tokens.push_back(t);
    std::vector<int32_t> types(tokens.size(), 1);
    types[kEnd] = types[kBos] = 3;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    // Rank order: "b c" outranks "a b"; "a a" exists for the leftmost-first rule.
    if (with_merges)
      w.set_strings("tokenizer.ggml.merges", {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "a a", "b c", "a b"});
    w.set_u32("tokenizer.ggml.bos_token_id", kBos);
    w.set_u32("tokenizer.ggml.eos_token_id", kEnd);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
  });
}

TEST(ByteLevelBpe, MergesByRank) {
  const auto t = make_bpe();
  EXPECT_EQ(t.tok->encode("hello"), (Ids{kHello}));
  EXPECT_EQ(t.tok->encode("hello world"), (Ids{kHello, kSpaceW, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(t.tok->encode("abc"), (Ids{'a', kBc}));  // "b c" (rank 6) before "a b" (rank 7)
  EXPECT_EQ(t.tok->encode("ab"), (Ids{kAb}));
}

TEST(ByteLevelBpe, EqualRanksMergeLeftmostFirst) {
  const auto t = make_bpe();
  EXPECT_EQ(t.tok->encode("aaa"), (Ids{kAa, 'a'}));
  EXPECT_EQ(t.tok->encode("aaaa"), (Ids{kAa, kAa}));
}

TEST(ByteLevelBpe, SpecialTextIsATokenOnlyWhenParsingIsOn) {
  const auto t = make_bpe();
  EXPECT_EQ(t.tok->encode("he<|end|>", {.parse_special = true}), (Ids{kHe, kEnd}));
  EXPECT_EQ(t.tok->encode("<|end|>"), (Ids{'<', '|', 'e', 'n', 'd', '|', '>'}));
}

TEST(ByteLevelBpe, BosAndEosFollowOptionsAndMetadata) {
  const auto t = make_bpe();
  EXPECT_FALSE(t.tok->adds_bos());
  EXPECT_EQ(t.tok->encode("he"), (Ids{kHe}));
  EXPECT_EQ(t.tok->encode("he", {.add_bos = true, .add_eos = true}), (Ids{kBos, kHe, kEnd}));
  EXPECT_EQ(t.tok->encode("", {.add_bos = true}), (Ids{kBos}));
  EXPECT_TRUE(t.tok->is_end_of_generation(kEnd));
  EXPECT_FALSE(t.tok->is_end_of_generation(kHe));
}

TEST(ByteLevelBpe, InvalidUtf8IsKeptByteForByte) {
  const auto t = make_bpe();
  const std::string text = "a\xFF" "b\xC3(\xE2\x82";
  const Ids ids = t.tok->encode(text);
  EXPECT_EQ(ids, (Ids{'a', 0xFF, 'b', 0xC3, '(', 0xE2, 0x82}));
  EXPECT_EQ(t.tok->decode(ids), text);
}

TEST(ByteLevelBpe, PiecesAreRawBytes) {
  const auto t = make_bpe();
  EXPECT_EQ(t.tok->piece(kSpaceW), " w");
  EXPECT_EQ(t.tok->token_text(kSpaceW), "\xC4\xA0w");
  EXPECT_EQ(t.tok->decode(Ids{kHello, kSpaceW}), "hello w");
  EXPECT_EQ(t.tok->decode(Ids{kHe, kEnd}, {.skip_special = true}), "he");
  EXPECT_THROW(t.tok->decode(Ids{99999}), Error);
}

TEST(ByteLevelBpe, StreamHoldsBytesUntilTheCharacterIsComplete) {
  const auto t = make_bpe();
  StreamDecoder stream(*t.tok);
  EXPECT_EQ(stream.push('a'), "a");
  EXPECT_EQ(stream.push(0xC3), "");  // first byte of é
  EXPECT_EQ(stream.pending(), 1u);
  EXPECT_EQ(stream.push(0xA9), "\xC3\xA9");
  EXPECT_EQ(stream.push(0xFF), "\xFF");  // never valid: not held
  EXPECT_EQ(stream.push(0xE2), "");
  EXPECT_EQ(stream.finish(), "\xE2");
}

TEST(ByteLevelBpe, IgnoreMergesTakesWholeWordTokens) {
  EXPECT_EQ(make_bpe("llama3").tok->encode("xyz"), (Ids{kXyz}));
  EXPECT_EQ(make_bpe("gpt2").tok->encode("xyz"), (Ids{'x', 'y', 'z'}));
}

TEST(ByteLevelBpe, UnknownPreTokenizerAndMissingMergesAreErrors) {
  try {
    make_bpe("mystery");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'mystery'"), std::string::npos);
  }
  try {
    make_bpe("gpt2", false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Format);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos);
  }
}

}  // namespace
}  // namespace cellm::tokenizer
