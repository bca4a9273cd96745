#include "server/auth.h"

#include <algorithm>
#include <cctype>

namespace cellm::server {
namespace {

// Compares without stopping at the first difference, so the time taken does not tell how
// much of a guessed key was right.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

ApiError unauthorized(const std::string& message) {
  return ApiError(401, "invalid_request_error", message, std::nullopt, "invalid_api_key");
}

}  // namespace

std::optional<ApiError> check_bearer_token(const std::optional<std::string>& authorization, const std::string& api_key) {
  if (api_key.empty()) return std::nullopt;
  if (!authorization) return unauthorized("no API key given: send the header 'Authorization: Bearer <key>'");
  const std::string& value = *authorization;
  const std::string scheme = "bearer ";
  const bool is_bearer =
      value.size() > scheme.size() && std::equal(scheme.begin(), scheme.end(), value.begin(), [](char s, char v) {
        return s == std::tolower(static_cast<unsigned char>(v));
      });
  if (!is_bearer) return unauthorized("the Authorization header must be 'Bearer <key>'");
  std::string token = value.substr(scheme.size());
  token.erase(0, token.find_first_not_of(' '));
  while (!token.empty() && token.back() == ' ') token.pop_back();
  if (!same_secret(token, api_key)) return unauthorized("incorrect API key");
  return std::nullopt;
}

}  // namespace cellm::server
