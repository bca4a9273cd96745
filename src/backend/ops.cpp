#include "backend/ops.h"

#include "backend/backend.h"
#include "core/error.h"

namespace cellm::backend {

const char* rope_layout_name(RopeLayout layout) { return layout == RopeLayout::Neox ? "neox" : "interleaved"; }

void Backend::begin_capture() { fail(ErrorCode::Unsupported, "the ", name(), " backend cannot capture graphs"); }

std::unique_ptr<Graph> Backend::end_capture() {
  fail(ErrorCode::Unsupported, "the ", name(), " backend cannot capture graphs");
}

}  // namespace cellm::backend
