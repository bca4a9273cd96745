#include "runtime/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace cellm::runtime {

StepInputs::StepInputs(backend::Backend& backend, std::span<const size_t> capacities)
    : backend_(backend), capacities_(capacities.begin(), capacities.end()), used_(capacities.size(), 0) {
  for (size_t bytes : capacities_) {
    offsets_.push_back(total_);
    total_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  total_ = std::max(total_, kAlignment);
  device_ = backend_.allocate(total_, "step inputs");
  try {
    host_ = static_cast<char*>(backend_.allocate_host(total_, "step inputs (host side)"));
  } catch (...) {
    backend_.release(device_);
    throw;
  }
  std::memset(host_, 0, total_);
}

StepInputs::~StepInputs() {
  backend_.release_host(host_);
  backend_.release(device_);
}

void StepInputs::put(size_t region, std::span<const int32_t> values) {
  const size_t bytes = values.size_bytes();
  if (bytes > capacities_[region])
    fail(ErrorCode::Internal, "step input region ", region, " holds ", capacities_[region], " bytes, not ", bytes);
  if (in_flight_) {
    backend_.synchronize();
    in_flight_ = false;
  }
  if (bytes > 0) std::memcpy(host_ + offsets_[region], values.data(), bytes);
  used_[region] = bytes;
}

int StepInputs::upload() {
  int copies = 0;
  size_t begin = 0, end = 0;  // the stretch being gathered: [begin, end) of the buffer
  auto send = [&] {
    if (end > begin) {
      backend_.upload(static_cast<char*>(device_) + begin, host_ + begin, end - begin);
      ++copies;
    }
  };
  for (size_t r = 0; r < used_.size(); ++r) {
    if (used_[r] == 0) continue;
    const size_t at = offsets_[r];
    if (end == begin) {
      begin = at;
    } else if (at - end > kMergeGapBytes) {
      send();
      begin = at;
    }
    end = at + used_[r];
    used_[r] = 0;
  }
  send();
  in_flight_ = copies > 0;
  return copies;
}

}  // namespace cellm::runtime
