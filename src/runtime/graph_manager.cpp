#include "runtime/graph_manager.h"

#include "core/error.h"
#include "core/log.h"

namespace cellm::runtime {

GraphManager::GraphManager(backend::Backend& backend, int32_t buckets, int32_t warmups)
    : backend_(backend), warmups_(std::max(0, warmups)), slots_(static_cast<size_t>(buckets)) {}

void GraphManager::invalidate_all() {
  bool any = false;
  for (Slot& s : slots_) {
    if (s.graph) {
      s.graph.reset();
      s.captured_before = true;
      any = true;
    }
    s.warmups = 0;
  }
  if (any) ++stats_.invalidations;
}

void GraphManager::run(int32_t bucket, uint64_t epoch, const std::function<void()>& record) {
  if (have_epoch_ && epoch != epoch_) invalidate_all();
  epoch_ = epoch;
  have_epoch_ = true;
  Slot& slot = slots_.at(static_cast<size_t>(bucket));
  if (slot.graph) {
    slot.graph->launch();
    ++stats_.replays;
    return;
  }
  if (slot.failed || slot.warmups < warmups_) {
    record();
    ++slot.warmups;
    ++stats_.eager_decode_steps;
    return;
  }
  try {
    backend_.begin_capture();
    try {
      record();
    } catch (...) {
      try {
        backend_.end_capture();  // leave capture mode before reporting
      } catch (const Error&) {
      }
      throw;
    }
    slot.graph = backend_.end_capture();
  } catch (const Error& e) {
    ++stats_.failures;
    slot.failed = true;
    log_warn("decode bucket ", bucket, ": graph capture failed (", e.what(), "); it runs eagerly from now on");
    record();
    ++stats_.eager_decode_steps;
    return;
  }
  ++(slot.captured_before ? stats_.recaptures : stats_.captures);
  slot.captured_before = true;
  slot.graph->launch();
  ++stats_.replays;
}

}  // namespace cellm::runtime
