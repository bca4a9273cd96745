#pragma once
// llama.cpp's greedy runs of the default models, as scripts/gen-reference-tokens records them in
// tests/data/reference/<model>-<build>.json: per prompt llama.cpp's prompt ids (its own rendering
// of the chat template), its 64 greedy tokens and its top-10 logits before each one. <build> is
// the instruction set llama.cpp was compiled for (avx512, avx2), which changes its arithmetic.
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace cellm::test {

struct ReferencePrompt {
  std::string text, rendered;
  std::vector<int32_t> prompt_ids, tokens;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logits;
};

struct Reference {
  std::string format;       // "chat" or "raw"
  std::string system_info;  // llama_print_system_info() of the build that wrote it
  std::vector<ReferencePrompt> prompts;
};

inline std::string reference_path(const std::string& model, const std::string& build) {
  return std::string(CELLM_SOURCE_DIR) + "/tests/data/reference/" + model + "-" + build + ".json";
}

inline Reference load_reference(const std::string& model, const std::string& build) {
  const std::string path = reference_path(model, build);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing " + path + " (scripts/gen-reference-tokens writes it)");
  const nlohmann::json data = nlohmann::json::parse(in);
  Reference ref;
  data.at("format").get_to(ref.format);
  data.at("settings").at("system_info").get_to(ref.system_info);
  for (const auto& p : data.at("prompts")) {
    ReferencePrompt r;
    p.at("text").get_to(r.text), p.at("rendered").get_to(r.rendered);
    p.at("prompt_ids").get_to(r.prompt_ids), p.at("tokens").get_to(r.tokens);
    p.at("top_ids").get_to(r.top_ids), p.at("top_logits").get_to(r.top_logits);
    ref.prompts.push_back(std::move(r));
  }
  return ref;
}

}  // namespace cellm::test
