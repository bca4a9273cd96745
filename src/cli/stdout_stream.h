#pragma once
// Callbacks that stream a generation's text to stdout as it comes (run, chat) and hand its
// result to whoever waits on `done`.
#include <future>

#include "batching/generation.h"

namespace cellm::cli {

batching::GenerationCallbacks stream_to_stdout(std::promise<batching::GenerationResult>& done);

}  // namespace cellm::cli
