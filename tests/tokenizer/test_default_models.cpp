// The two default models' tokenizers: their special tokens, flags and behaviour on input that
// the parity corpus cannot hold (invalid UTF-8).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "common/test_models.h"
#include "gguf/file.h"
#include "round_trip.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace cellm::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& path) {
  Loaded l;
  l.file = gguf::File::open(path);
  const auto start = std::chrono::steady_clock::now();
  l.tok = Tokenizer::from_gguf(*l.file);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ load ] %s: tokenizer of %zu tokens built in %.1f ms\n", path.c_str(), l.tok->vocab_size(), ms);
  return l;
}

TEST(DefaultModels, SmolLM2SpecialTokens) {
  CELLM_REQUIRE_MODEL(path, test::kSmolLM2);
  const auto m = load(path);
  const Tokenizer& t = *m.tok;
  EXPECT_EQ(t.kind(), VocabKind::ByteLevelBpe);
  EXPECT_EQ(t.pre_tokenizer(), "smollm");
  EXPECT_EQ(t.vocab_size(), 49152u);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.eot(), 2);  // <|im_end|>
  EXPECT_FALSE(t.adds_bos());
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_TRUE(t.is_end_of_generation(0));  // <|endoftext|>
  EXPECT_FALSE(t.is_end_of_generation(1));
  EXPECT_EQ(t.encode("Hello world"), (Ids{19556, 905}));
  EXPECT_EQ(t.piece(905), " world");
}

TEST(DefaultModels, Gemma3SpecialTokens) {
  CELLM_REQUIRE_MODEL(path, test::kGemma3);
  const auto m = load(path);
  const Tokenizer& t = *m.tok;
  EXPECT_EQ(t.kind(), VocabKind::SentencePiece);
  EXPECT_EQ(t.vocab_size(), 262144u);
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 1);
  EXPECT_EQ(t.eot(), 106);  // <end_of_turn>, which the file names nowhere
  EXPECT_TRUE(t.adds_bos());
  EXPECT_TRUE(t.is_end_of_generation(1));
  EXPECT_TRUE(t.is_end_of_generation(106));
  EXPECT_FALSE(t.is_end_of_generation(105));
  EXPECT_EQ(t.encode("Hello world"), (Ids{2, 9259, 1902}));
  EXPECT_EQ(t.piece(107), "\n");
}

// The rendered prompt is encoded with special parsing and the file's BOS flag.
TEST(DefaultModels, RenderedChatPromptsEncodeTurnMarkersAsTokens) {
  CELLM_REQUIRE_MODEL(gemma_path, test::kGemma3);
  const auto m = load(gemma_path);
  const std::vector<ChatMessage> chat = {{"user", "hi"}};
  const std::string prompt = ChatTemplate::for_model(*m.file).render(chat, true);
  const Ids ids = m.tok->encode(prompt, {.parse_special = true});
  const int32_t model = m.tok->find_token("model");
  ASSERT_NE(model, kNoToken);
  EXPECT_EQ(ids, (Ids{2, 105, m.tok->find_token("user"), 107, m.tok->find_token("hi"), 106, 107, 105, model, 107}));
}

// Random bytes, mostly invalid UTF-8: no crash, and nothing is lost beyond what the vocabulary
// cannot hold (byte-level BPE keeps each invalid byte as its byte token; SentencePiece falls
// back to <0xXX>).
TEST(DefaultModels, InvalidUtf8RoundTrips) {
  for (const char* file : {test::kSmolLM2, test::kGemma3}) {
    CELLM_REQUIRE_MODEL(path, file);
    const auto m = load(path);
    std::mt19937 rng(1234);
    for (int i = 0; i < 500; ++i) {
      std::string s(rng() % 48, '\0');
      for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? ' ' + rng() % 95 : rng() % 256);
      for (const bool special : {false, true}) {
        const Ids ids = m.tok->encode(s, {.add_bos = false, .parse_special = special});
        EXPECT_EQ(m.tok->decode(ids), test::expected_round_trip(*m.tok, s)) << file;
      }
    }
  }
}

}  // namespace
}  // namespace cellm::tokenizer
