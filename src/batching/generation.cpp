#include "batching/generation.h"

namespace cellm::batching {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Failed: return "failed";
  }
  return "unknown";
}

}  // namespace cellm::batching
