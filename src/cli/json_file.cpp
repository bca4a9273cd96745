#include "cli/json_file.h"

#include <fstream>

#include "batching/json_text.h"
#include "core/error.h"

namespace cellm::cli {

void write_json_file(const std::string& path, const nlohmann::json& value) {
  std::ofstream out(path);
  if (!out) fail(ErrorCode::Io, "cannot write '", path, "'");
  out << batching::json_text(value, 2) << "\n";
  if (!out.flush()) fail(ErrorCode::Io, "writing '", path, "' failed");
}

}  // namespace cellm::cli
