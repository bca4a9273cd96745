#pragma once
// Errors as the OpenAI API reports them: an HTTP status and the body
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Request handlers throw ApiError; the HTTP layer turns it into that response.
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/error.h"

namespace cellm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt, int retry_after_seconds = 0);

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  int retry_after_seconds() const { return retry_after_; }  // 0: no Retry-After header
  nlohmann::json body() const;

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
  int retry_after_;
};

// 400 invalid_request_error naming the offending field.
template <typename... Args>
[[noreturn]] void reject_field(const std::string& param, Args&&... message) {
  throw ApiError(400, "invalid_request_error", str_cat(std::forward<Args>(message)...), param);
}

// The error body a client sees for `error` (also used inside SSE streams).
nlohmann::json error_body(const std::string& type, const std::string& message,
                          const std::optional<std::string>& param = std::nullopt,
                          const std::optional<std::string>& code = std::nullopt);

}  // namespace cellm::server
