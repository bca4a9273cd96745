#include "cli/json_file.h"

#include <fstream>

#include "core/error.h"

namespace cellm::cli {

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void write_json_file(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path);
  if (!out) fail(ErrorCode::Io, "cannot write '", path, "'");
  out << json_text(value, 2) << "\n";
  if (!out.flush()) fail(ErrorCode::Io, "writing '", path, "' failed");
}

}  // namespace cellm::cli
