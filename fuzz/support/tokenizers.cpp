#include "support/tokenizers.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "../tests/tokenizer/round_trip.h"
#include "support/check.h"
#include "support/micro_model.h"

namespace cellm::fuzz {

std::vector<std::string> default_model_paths() {
  const char* dir = std::getenv("CELLM_MODELS_DIR");
  const std::filesystem::path models = dir ? dir : CELLM_SOURCE_DIR "/models";
  return {(models / "SmolLM2-135M-Instruct.Q4_1.gguf").string(), (models / "gemma-3-270m-q4_k_m.gguf").string()};
}

std::vector<int32_t> encode_checked(const tokenizer::Tokenizer& tok, std::string_view text, bool parse_special) {
  const std::vector<int32_t> ids = tok.encode(text, {.add_bos = false, .add_eos = false, .parse_special = parse_special});
  for (int32_t id : ids)
    FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < tok.vocab_size(), "encode produced id ", id);
  const std::string back = tok.decode(ids);
  const std::string expected = test::expected_round_trip(tok, text);
  FUZZ_CHECK(back == expected, "round trip of ", text.size(), " bytes gave ", back.size(), ", expected ",
             expected.size(), " (parse_special=", parse_special, ")");
  return ids;
}

bool models_required() {
  const char* v = std::getenv("CELLM_REQUIRE_MODELS");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

namespace {

std::vector<FuzzTokenizer> load_all() {
  std::vector<FuzzTokenizer> out;
  for (const std::string& path : default_model_paths()) {
    if (!std::filesystem::exists(path)) {
      std::fprintf(stderr, "fuzz: %s is missing; %s (run scripts/fetch-models)\n", path.c_str(),
                   models_required() ? "CELLM_REQUIRE_MODELS is set" : "skipping its tokenizer");
      if (models_required()) std::exit(1);
      continue;
    }
    FuzzTokenizer t;
    t.name = std::filesystem::path(path).filename().string();
    t.file = gguf::File::open(path);
    t.tokenizer = tokenizer::Tokenizer::from_gguf(*t.file);
    out.push_back(std::move(t));
  }
  FuzzTokenizer micro;
  micro.name = "micro-llama";
  micro.bytes = random_model_bytes(micro_model_spec("llama"));
  micro.file = gguf::File::parse(micro.bytes, micro.name);
  micro.tokenizer = tokenizer::Tokenizer::from_gguf(*micro.file);
  out.push_back(std::move(micro));
  return out;
}

}  // namespace

const std::vector<FuzzTokenizer>& fuzz_tokenizers() {
  static const std::vector<FuzzTokenizer> all = load_all();
  return all;
}

const tokenizer::Tokenizer& pick_tokenizer(uint8_t selector) {
  const auto& all = fuzz_tokenizers();
  return *all[selector % all.size()].tokenizer;
}

}  // namespace cellm::fuzz
