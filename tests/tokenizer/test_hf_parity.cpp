// Token ids equal those of the Hugging Face tokenizer built from the same GGUF file, on the
// committed corpus (scripts/gen-tokenizer-expectations); decode(encode(s)) == s; and text
// streamed token by token equals the full decode.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_models.h"
#include "corpus.h"
#include "round_trip.h"
#include "gguf/file.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace cellm::tokenizer {
namespace {

struct ModelCase {
  const char* key;   // file prefix in tests/data/tokenizer
  const char* file;  // GGUF in models/
};

std::string show_ids(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

class HfParity : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    CELLM_REQUIRE_MODEL(path, GetParam().file);
    file_ = gguf::File::open(path);
    tok_ = Tokenizer::from_gguf(*file_);
    corpus_ = test::read_corpus();
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<std::string> corpus_;
};

void expect_ids_match(const Tokenizer& tok, const std::vector<std::string>& corpus,
                      const std::vector<std::vector<int32_t>>& expected, bool parse_special) {
  ASSERT_EQ(expected.size(), corpus.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto ids = tok.encode(corpus[i], {.add_bos = false, .parse_special = parse_special});
    if (ids == expected[i]) continue;
    if (++mismatches <= 10)
      ADD_FAILURE() << "corpus line " << i + 1 << " (parse_special=" << parse_special << "): \"" << corpus[i]
                    << "\"\n  expected " << show_ids(expected[i]) << "\n  got      " << show_ids(ids);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << corpus.size() << " strings";
  std::printf("[ parity ] %zu strings compared (parse_special=%d), %zu mismatches\n", corpus.size(),
              parse_special ? 1 : 0, mismatches);
}

// The ids files hold content tokens; whether BOS goes in front is the file's flag, which the
// Hugging Face tokenizer follows too for these models (recorded in expectations.json).
TEST_P(HfParity, BosIsAddedExactlyWhenHuggingFaceAddsIt) {
  std::ifstream in(test::tokenizer_data_path("expectations.json"));
  ASSERT_TRUE(in);
  const auto meta = nlohmann::json::parse(in)["models"][GetParam().key];
  EXPECT_EQ(tok_->adds_bos(), meta["adds_bos"].get<bool>());
  EXPECT_EQ(tok_->bos(), meta["bos_id"].get<int32_t>());
  const auto with_bos = tok_->encode("a");
  EXPECT_EQ(with_bos.size(), tok_->encode("a", {.add_bos = false}).size() + (tok_->adds_bos() ? 1 : 0));
}

TEST_P(HfParity, IdsEqualHuggingFaceWithSpecialTextAsPlainText) {
  const auto plain = test::read_ids(std::string(GetParam().key) + ".plain.ids");
  expect_ids_match(*tok_, corpus_, plain, false);
}

TEST_P(HfParity, IdsEqualHuggingFaceWithSpecialTokensParsed) {
  const auto plain = test::read_ids(std::string(GetParam().key) + ".plain.ids");
  const auto special = test::read_ids(std::string(GetParam().key) + ".special.ids", &plain);
  expect_ids_match(*tok_, corpus_, special, true);
}

TEST_P(HfParity, DecodeOfEncodeGivesTheTextBack) {
  size_t checked = 0, exact = 0;
  for (const bool parse_special : {false, true}) {
    for (const auto& s : corpus_) {
      const std::string expected = test::expected_round_trip(*tok_, s);
      exact += expected == s;
      const auto ids = tok_->encode(s, {.add_bos = false, .parse_special = parse_special});
      EXPECT_EQ(tok_->decode(ids), expected) << "parse_special=" << parse_special;
      // With the file's BOS, skip_special drops it again (plain text holds no other control token).
      if (!parse_special) {
        EXPECT_EQ(tok_->decode(tok_->encode(s), {.skip_special = true}), expected);
      }
      ++checked;
    }
  }
  std::printf("[ round trip ] %zu encodes checked, %zu of them of text the vocabulary holds exactly\n", checked,
              exact);
}

TEST_P(HfParity, StreamedDecodeEqualsFullDecode) {
  for (const auto& s : corpus_) {
    const auto ids = tok_->encode(s, {.parse_special = true});
    const std::string full = tok_->decode(ids);
    // Dropped bytes (see round_trip.h) can leave the full text itself invalid.
    const bool whole_chunks = utf8::is_valid(full);
    StreamDecoder stream(*tok_);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = stream.push(id);
      if (whole_chunks) {
        EXPECT_TRUE(utf8::is_valid(chunk)) << "a chunk of \"" << s << "\" is not whole UTF-8";
      }
      streamed += chunk;
    }
    if (whole_chunks) {
      EXPECT_EQ(stream.pending(), 0u) << s;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, full) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(DefaultModels, HfParity,
                         ::testing::Values(ModelCase{"smollm2", test::kSmolLM2}, ModelCase{"gemma3", test::kGemma3}),
                         [](const auto& param_info) { return std::string(param_info.param.key); });

}  // namespace
}  // namespace cellm::tokenizer
