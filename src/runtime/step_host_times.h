#pragma once
#include <cstdint>

namespace cellm::runtime {

// Where the host's time goes in decode steps (seconds, summed over them). On a device the
// step's kernels run from its launch until the wait returns; what the host does before the
// launch and after the wait (and between two runs, in the engine) the device waits for: the
// gap between steps, which a graph does not remove.
struct StepHostTimes {
  int64_t steps = 0;
  double inputs_s = 0;  // the cache's placement, the step's inputs shaped and sent, bindings checked
  double launch_s = 0;  // issuing the forward: a graph launch, or every kernel of an eager step
  double wait_s = 0;    // reading the output: waits for the device to finish the step
  double total_s = 0;   // the whole of Executor::run (the above, the commit, the bookkeeping)

  // The times of the steps after `before` (counters taken earlier from the same executor).
  StepHostTimes since(const StepHostTimes& before) const {
    return {steps - before.steps, inputs_s - before.inputs_s, launch_s - before.launch_s, wait_s - before.wait_s,
            total_s - before.total_s};
  }
};

}  // namespace cellm::runtime
