#include "cli/stdout_stream.h"

#include <cstdio>
#include <string>

namespace cellm::cli {

batching::GenerationCallbacks stream_to_stdout(std::promise<batching::GenerationResult>& done) {
  batching::GenerationCallbacks callbacks;
  callbacks.on_token = [](batching::GenerationId, int32_t, const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);  // a chat turn shows each piece as it is decoded
  };
  callbacks.on_finish = [&done](const batching::GenerationResult& r) { done.set_value(r); };
  return callbacks;
}

}  // namespace cellm::cli
