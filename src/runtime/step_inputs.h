#pragma once
// The inputs the host writes before every forward (tokens, positions, logit rows, cells, the
// read length, page lists): regions of ONE device buffer, at fixed addresses (a captured graph
// binds them), with a host mirror of the same layout in memory the backend copies from fastest
// (page-locked on CUDA). A step writes the regions it uses into the mirror and sends them in one
// copy (one per stretch of regions in use: see upload), where each array had taken a copy of its
// own. Why: a decode step of one row is a few hundred microseconds of device work, and each
// copy costs the host a driver call and the stream an operation ahead of the step's kernels.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace cellm::runtime {

class StepInputs {
 public:
  // One region per capacity (bytes), in this order; every region starts kAlignment-aligned.
  StepInputs(backend::Backend& backend, std::span<const size_t> capacities);
  ~StepInputs();
  StepInputs(const StepInputs&) = delete;
  StepInputs& operator=(const StepInputs&) = delete;

  static constexpr size_t kAlignment = 256;
  // Regions whose used parts are at most this many bytes apart travel in one copy, the unused
  // bytes between them included: copying 32 KiB costs about what starting a copy does.
  static constexpr size_t kMergeGapBytes = 32 * 1024;

  void* device(size_t region) const { return static_cast<char*>(device_) + offsets_[region]; }
  size_t capacity(size_t region) const { return capacities_[region]; }

  // Writes `values` to the start of `region` in the mirror; the next upload sends the region up
  // to their end. Throws Internal if they do not fit. Waits for the last upload first
  // if the step that made it never waited (a failed step): the copy may still be reading.
  void put(size_t region, std::span<const int32_t> values);
  // Sends the used part of every region put since the last upload; returns the copies made.
  int upload();
  // The stream has waited for everything issued so far (the executor read the step's output):
  // the mirror may be rewritten without a wait.
  void settled() { in_flight_ = false; }

 private:
  backend::Backend& backend_;
  std::vector<size_t> capacities_, offsets_, used_;  // used: bytes put since the last upload
  size_t total_ = 0;
  void* device_ = nullptr;
  char* host_ = nullptr;
  bool in_flight_ = false;
};

}  // namespace cellm::runtime
