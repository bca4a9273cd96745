#include "server/api_error.h"

namespace cellm::server {

ApiError::ApiError(int status, std::string type, std::string message, std::optional<std::string> param,
                   std::optional<std::string> code, int retry_after_seconds)
    : std::runtime_error(std::move(message)),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)),
      retry_after_(retry_after_seconds) {}

nlohmann::json ApiError::body() const { return error_body(type_, what(), param_, code_); }

nlohmann::json error_body(const std::string& type, const std::string& message, const std::optional<std::string>& param,
                          const std::optional<std::string>& code) {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (param) e["param"] = *param;
  if (code) e["code"] = *code;
  return {{"error", e}};
}

}  // namespace cellm::server
