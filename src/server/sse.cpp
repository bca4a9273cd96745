#include "server/sse.h"

#include "batching/json_text.h"

namespace cellm::server {

std::string sse_event(const nlohmann::json& data) {
  std::string event = "data: ";
  event += batching::json_text(data);
  event += "\n\n";
  return event;
}

}  // namespace cellm::server
