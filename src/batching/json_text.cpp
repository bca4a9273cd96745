#include "batching/json_text.h"

namespace cellm::batching {

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cellm::batching
