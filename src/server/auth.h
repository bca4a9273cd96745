#pragma once
// `--api-key`: the /v1 routes want "Authorization: Bearer <key>". /health and /metrics stay
// open so that load balancers and scrapers need no secret.
#include <optional>
#include <string>

#include "server/api_error.h"

namespace cellm::server {

// None when `authorization` (the header's value; nullopt when absent) carries `api_key`, or
// when no key is configured; otherwise the 401 to answer.
std::optional<ApiError> check_bearer_token(const std::optional<std::string>& authorization, const std::string& api_key);

}  // namespace cellm::server
