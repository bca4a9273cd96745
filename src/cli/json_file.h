#pragma once
// JSON files the commands write (batch and bench reports), as batching::json_text makes them.
#include <string>

#include <nlohmann/json.hpp>

namespace cellm::cli {

// Writes batching::json_text(value, 2) and a newline to `path`; fails with ErrorCode::Io naming
// the path.
void write_json_file(const std::string& path, const nlohmann::json& value);

}  // namespace cellm::cli
