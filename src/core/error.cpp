#include "core/error.h"

namespace cellm {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid_argument";
    case ErrorCode::Format: return "format";
    case ErrorCode::NotFound: return "not_found";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::OutOfMemory: return "out_of_memory";
    case ErrorCode::LimitExceeded: return "limit_exceeded";
    case ErrorCode::Io: return "io";
    case ErrorCode::Internal: return "internal";
  }
  return "unknown";
}

}  // namespace cellm
