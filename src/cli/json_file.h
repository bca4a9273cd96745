#pragma once
// JSON the commands write out (batch and bench reports, inspect --json). Generated text may hold
// bytes that are not UTF-8 (a generation cut inside a multi-byte character, byte tokens of a
// random-weight model) and nlohmann::json refuses to serialize them; the report is written with
// each invalid byte replaced by U+FFFD instead, as the server's responses are (server/sse.h).
#include <string>

#include <nlohmann/json.hpp>

namespace cellm::cli {

std::string json_text(const nlohmann::json& value, int indent);

// Writes json_text(value, 2) and a newline to `path`; fails with ErrorCode::Io naming the path.
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace cellm::cli
