#pragma once
// A fixed set of worker threads that run one parallel loop at a time. The calling thread
// takes part, so a pool of N threads has N-1 workers. Workers spin briefly before sleeping:
// a decode step issues hundreds of short loops and waking a sleeping thread costs more than
// the work of one.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cellm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread) for task in [0, n_tasks), spread over the threads; returns when
  // every call has returned. The first exception thrown by fn is rethrown here.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

  static int hardware_threads();

 private:
  void worker_loop(int thread);
  void run_tasks(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> busy_workers_{0};
  int64_t n_tasks_ = 0;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;
  bool stop_ = false;
};

}  // namespace cellm
