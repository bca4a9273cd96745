#pragma once
// Reads the committed parity data of tests/data/tokenizer (see scripts/gen-tokenizer-expectations):
// the corpus (one JSON string per line) and per-model expected ids (one line per string).
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cellm::test {

inline std::string tokenizer_data_path(const std::string& file) {
  return std::string(CELLM_SOURCE_DIR) + "/tests/data/tokenizer/" + file;
}

inline std::vector<std::string> read_corpus() {
  std::ifstream in(tokenizer_data_path("corpus.jsonl"));
  if (!in) throw std::runtime_error("cannot read " + tokenizer_data_path("corpus.jsonl"));
  std::vector<std::string> corpus;
  for (std::string line; std::getline(in, line);) corpus.push_back(nlohmann::json::parse(line).get<std::string>());
  return corpus;
}

// One id list per line; "=" repeats the line of `same_as` (used by the .special.ids files).
inline std::vector<std::vector<int32_t>> read_ids(const std::string& file,
                                                  const std::vector<std::vector<int32_t>>* same_as = nullptr) {
  std::ifstream in(tokenizer_data_path(file));
  if (!in) throw std::runtime_error("cannot read " + tokenizer_data_path(file));
  std::vector<std::vector<int32_t>> rows;
  for (std::string line; std::getline(in, line);) {
    if (line == "=" && same_as) {
      rows.push_back(same_as->at(rows.size()));
      continue;
    }
    std::istringstream fields(line);
    std::vector<int32_t> ids;
    for (int64_t id; fields >> id;) ids.push_back(static_cast<int32_t>(id));
    rows.push_back(std::move(ids));
  }
  return rows;
}

}  // namespace cellm::test
