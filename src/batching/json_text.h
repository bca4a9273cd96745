#pragma once
// JSON as text, with every byte sequence that is not UTF-8 replaced by U+FFFD. A model can emit
// such bytes (a generation cut inside a multi-byte character, the byte tokens of a random-weight
// model) and nlohmann::json refuses to serialize them by default: one bad byte would lose a
// whole server response or command report. Everything cellm writes as JSON goes through here.
#include <nlohmann/json.hpp>
#include <string>

namespace cellm::batching {

// indent -1: compact, on one line.
std::string json_text(const nlohmann::json& value, int indent = -1);

}  // namespace cellm::batching
