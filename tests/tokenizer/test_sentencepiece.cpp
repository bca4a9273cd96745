// SentencePiece BPE on a vocabulary small enough to know every score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "synthetic_vocab.h"
#include "tokenizer/stream_decoder.h"

namespace cellm::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

constexpr int32_t kUnk = 0, kBos = 1, kEos = 2, kByte0 = 3;  // <0x00>..<0xFF> are 3..258
enum : int32_t { kSpace = 259, kA, kB, kSpaceA, kAb, kSpaceAb, kNewline, kCtrl, kXy, kYz, kBSpace, kBSpaceA };

struct Options {
  bool space_prefix = false;
  float xy_score = -1.0f, yz_score = -2.0f;
  bool cross_space = false;  // add "b▁" and "b▁a": tokens with a space inside
};

test::SyntheticTokenizer make_spm(const Options& o = {}) {
  return test::make_tokenizer([&](gguf::Writer& w) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    std::vector<float> scores = {0, 0, 0};
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      tokens.push_back(name);
      types.push_back(6);
      scores.push_back(0);
    }
    const std::vector<std::pair<std::string, float>> normal = {
        {"\xE2\x96\x81", -1}, {"a", -2}, {"b", -3}, {"\xE2\x96\x81" "a", -4}, {"ab", -5}, {"\xE2\x96\x81" "ab", -0.5f}};
    for (const auto& [t, s] : normal) {
      tokens.push_back(t);
      types.push_back(1);
      scores.push_back(s);
    }
    tokens.push_back("\n");
    types.push_back(4);
    scores.push_back(-1000);
    tokens.push_back("<ctrl>");
    types.push_back(3);
    scores.push_back(-1000);
    for (const auto& [t, s] : {std::pair{"xy", o.xy_score}, std::pair{"yz", o.yz_score}}) {
      tokens.push_back(t);
      types.push_back(1);
      scores.push_back(s);
    }
    if (o.cross_space) {
      for (const auto& [t, s] : {std::pair{"b\xE2\x96\x81", -0.2f}, std::pair{"b\xE2\x96\x81" "a", -0.1f}}) {
        tokens.push_back(t);
        types.push_back(1);
        scores.push_back(s);
      }
    }
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_f32s("tokenizer.ggml.scores", scores);
    w.set_u32("tokenizer.ggml.bos_token_id", kBos);
    w.set_u32("tokenizer.ggml.eos_token_id", kEos);
    w.set_u32("tokenizer.ggml.unknown_token_id", kUnk);
    w.set_bool("tokenizer.ggml.add_space_prefix", o.space_prefix);
    // add_bos_token left out: SentencePiece vocabularies add BOS by default.
  });
}

TEST(SentencePiece, HighestScoringPairMergesFirst) {
  EXPECT_EQ(make_spm({.xy_score = -1, .yz_score = -2}).tok->encode("xyz", {.add_bos = false}),
            (Ids{kXy, kByte0 + 'z'}));
  EXPECT_EQ(make_spm({.xy_score = -2, .yz_score = -1}).tok->encode("xyz", {.add_bos = false}),
            (Ids{kByte0 + 'x', kYz}));
}

TEST(SentencePiece, SpacesAreEscapedAndMergedByScore) {
  const auto t = make_spm();
  EXPECT_EQ(t.tok->encode("ab", {.add_bos = false}), (Ids{kAb}));
  EXPECT_EQ(t.tok->encode(" ab", {.add_bos = false}), (Ids{kSpaceAb}));  // ▁a, then ▁a+b
  EXPECT_EQ(t.tok->encode("b a", {.add_bos = false}), (Ids{kB, kSpaceA}));
  EXPECT_EQ(t.tok->piece(kSpaceAb), " ab");
}

// Words are merged one by one unless a token with a space inside could form; then the whole
// text is merged together, as it must be.
TEST(SentencePiece, TokensSpanningASpaceStillForm) {
  EXPECT_EQ(make_spm().tok->encode("ab a", {.add_bos = false}), (Ids{kAb, kSpaceA}));
  EXPECT_EQ(make_spm({.cross_space = true}).tok->encode("ab a", {.add_bos = false}), (Ids{kA, kBSpaceA}));
  const std::string long_text(3000, 'a');  // long enough for the word cache
  EXPECT_EQ(make_spm({.cross_space = true}).tok->encode(long_text + "b a", {.add_bos = false}).back(), kBSpaceA);
}

TEST(SentencePiece, BosIsAddedByDefault) {
  const auto t = make_spm();
  EXPECT_TRUE(t.tok->adds_bos());
  EXPECT_EQ(t.tok->encode("a"), (Ids{kBos, kA}));
}

TEST(SentencePiece, CharactersOutsideTheVocabularyFallBackToBytes) {
  const auto t = make_spm();
  const std::string text = "a\xC3\xA9\xFF";  // é is no token; 0xFF is not even UTF-8
  const Ids ids = t.tok->encode(text, {.add_bos = false});
  EXPECT_EQ(ids, (Ids{kA, kByte0 + 0xC3, kByte0 + 0xA9, kByte0 + 0xFF}));
  EXPECT_EQ(t.tok->decode(ids), text);
}

TEST(SentencePiece, UserDefinedTokensAlwaysMatchControlTokensOnlyOnRequest) {
  const auto t = make_spm();
  EXPECT_EQ(t.tok->encode("a\nb", {.add_bos = false}), (Ids{kA, kNewline, kB}));
  EXPECT_EQ(t.tok->encode("a<ctrl>", {.add_bos = false, .parse_special = true}), (Ids{kA, kCtrl}));
  const Ids plain = t.tok->encode("<ctrl>", {.add_bos = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kCtrl), 0);
  EXPECT_EQ(t.tok->decode(plain), "<ctrl>");
}

// With add_space_prefix, each run of plain text gets a leading space on encode, and decoding
// takes exactly that space away again.
TEST(SentencePiece, SpacePrefixIsAddedAndRemovedSymmetrically) {
  const auto t = make_spm({.space_prefix = true});
  EXPECT_EQ(t.tok->encode("ab", {.add_bos = false}), (Ids{kSpaceAb}));
  EXPECT_EQ(t.tok->decode(Ids{kSpaceAb}), "ab");
  for (const std::string s : {"ab", " ab", "ab<ctrl>ab", "a\nb", "<ctrl> a", "  b"}) {
    const Ids ids = t.tok->encode(s, {.parse_special = true});
    EXPECT_EQ(t.tok->decode(ids, {.skip_special = false}), "<s>" + s) << s;
    EXPECT_EQ(t.tok->decode(Ids(ids.begin() + 1, ids.end())), s) << s;
  }
}

TEST(SentencePiece, StreamWaitsForTheLastByteOfACharacter) {
  const auto t = make_spm();
  StreamDecoder stream(*t.tok);
  EXPECT_EQ(stream.push(kA), "a");
  EXPECT_EQ(stream.push(kByte0 + 0xF0), "");
  EXPECT_EQ(stream.push(kByte0 + 0x9F), "");
  EXPECT_EQ(stream.push(kByte0 + 0x8E), "");
  EXPECT_EQ(stream.push(kByte0 + 0x89), "\xF0\x9F\x8E\x89");
  EXPECT_EQ(stream.push(kSpaceA), " a");
  EXPECT_EQ(stream.finish(), "");
}

}  // namespace
}  // namespace cellm::tokenizer
