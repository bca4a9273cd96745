#include "backend/ops.h"

namespace cellm::backend {

const char* rope_layout_name(RopeLayout layout) { return layout == RopeLayout::Neox ? "neox" : "interleaved"; }

}  // namespace cellm::backend
