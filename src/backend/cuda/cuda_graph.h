#pragma once
// A captured and instantiated CUDA graph of one forward, launched on the backend's stream.
#include <cuda_runtime.h>

#include "backend/backend.h"

namespace cellm::cuda {

class CudaGraph final : public backend::Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void launch() override;

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Starts recording the stream's work (thread-local mode: other threads may use CUDA meanwhile).
void begin_stream_capture(cudaStream_t stream);
// Ends the recording and instantiates it; throws with CUDA's reason when capture failed.
std::unique_ptr<backend::Graph> end_stream_capture(cudaStream_t stream);
// Whether the stream's work is being recorded now (a capture in progress, or one that failed and
// awaits end_stream_capture): what is issued then runs at every replay, not now.
bool stream_is_capturing(cudaStream_t stream);

}  // namespace cellm::cuda
