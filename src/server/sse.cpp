#include "server/sse.h"

namespace cellm::server {

std::string to_json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& data) {
  std::string event = "data: ";
  event += to_json_text(data);
  event += "\n\n";
  return event;
}

}  // namespace cellm::server
