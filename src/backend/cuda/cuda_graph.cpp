#include "backend/cuda/cuda_graph.h"

#include "backend/cuda/cuda_check.h"

namespace cellm::cuda {

CudaGraph::~CudaGraph() { cudaGraphExecDestroy(exec_); }

void CudaGraph::launch() { check(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch"); }

void begin_stream_capture(cudaStream_t stream) {
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

std::unique_ptr<backend::Graph> end_stream_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  // End the capture whatever happened, so the stream is usable for eager work again.
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    check(ended != cudaSuccess ? ended : cudaErrorStreamCaptureInvalidated, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return std::make_unique<CudaGraph>(exec, stream);
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace cellm::cuda
