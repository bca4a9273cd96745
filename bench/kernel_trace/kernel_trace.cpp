// A kernel timeline of any cellm run on a GPU, without touching the program: the CUDA driver loads
// this library when CUDA_INJECTION64_PATH names it, and CUPTI then records every kernel's start
// and end as the device saw them (graph replays included, kernels overlapping under early
// launches included). Why not ncu: it serializes kernels, so its durations miss exactly what a
// decode step loses or gains between kernels; nsys is not on the machines we get.
//
//   CUDA_INJECTION64_PATH=build/bin/libcellm_kernel_trace.so cellm bench --backend cuda ...
//
// At exit it prints, per kernel name, what the kernels of one step cost on the step's critical
// path: for each kernel in start order, how far its end lies past the latest end before it
// (the gap before it included). These shares add up to the step's span.
// Environment: CELLM_KERNEL_TRACE=graph (default: kernels replayed from CUDA graphs, i.e. decode
// steps; one graph launch is one step) or all (every kernel; one step per stream
// synchronization is not known here, so all of them count as one step); CELLM_KERNEL_TRACE_JSON=
// FILE writes the same table as JSON; CELLM_KERNEL_TRACE_TIMELINE=FILE writes the mean step as
// a timeline (JSON): each kernel in start order, with its start and end after the step's start
// and its share of the critical path, averaged over the steps of the most common kernel count
// (a graph replays the same sequence, so position i is the same kernel in each of them).
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

struct KernelSpan {
  uint64_t start, end;
  uint32_t step;  // the launch that ran it: a graph launch's correlation id
  std::string name;
};

std::mutex spans_mutex;
std::vector<KernelSpan> spans;
bool graph_only = true;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, text ? text : "unknown CUPTI error");
  std::exit(1);
}

// "void cellm::cuda::(anonymous namespace)::gemv_kernel<Q4K, true>(Args)" -> "gemv_kernel<Q4K, true>"
std::string short_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                         &std::free);
  std::string name = status == 0 ? demangled.get() : mangled;
  for (const char* noise : {"void ", "(anonymous namespace)::", "cellm::cuda::", "cellm::"})
    for (size_t at; (at = name.find(noise)) != std::string::npos;) name.erase(at, std::strlen(noise));
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {  // cut the parameter list: the first '(' outside <>
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (name[i] == '(' && depth == 0) {
      name.resize(i);
      break;
    }
  }
  return name;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

size_t dropped_records = 0;  // CUPTI's count of records it had no buffer for: the report says so

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(spans_mutex);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) dropped_records += dropped;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (graph_only && k->graphId == 0) continue;
    spans.push_back({k->start, k->end, graph_only ? k->correlationId : 0u, short_name(k->name)});
  }
  std::free(buffer);
}

// A kernel's share of its step's critical path: how far its end lies past the latest end of the
// kernels that started before it (latest_end, which this advances), the gap before it included.
double critical_share_ns(const KernelSpan& s, uint64_t& latest_end) {
  const double share = s.end > latest_end ? static_cast<double>(s.end - latest_end) : 0.0;
  latest_end = std::max(latest_end, s.end);
  return share;
}

struct NameCost {
  double critical_ns = 0, busy_ns = 0;  // summed over steps
  size_t count = 0;
};

// The mean step of the steps with the most common kernel count, kernel by kernel (the file named
// by CELLM_KERNEL_TRACE_TIMELINE).
void write_timeline(const std::map<uint32_t, std::vector<const KernelSpan*>>& steps, const char* path) {
  std::map<size_t, size_t> by_count;
  for (auto& [id, list] : steps) ++by_count[list.size()];
  const size_t count = std::max_element(by_count.begin(), by_count.end(), [](auto& a, auto& b) {
                         return a.second < b.second;
                       })->first;
  struct Sum {
    double start = 0, end = 0, critical = 0;
  };
  std::vector<Sum> sums(count);
  double used = 0;
  const std::vector<const KernelSpan*>* named = nullptr;  // a step of that count: the kernels' names
  for (auto& [id, list] : steps) {  // sorted by start in report()
    if (list.size() != count) continue;
    used += 1;
    named = &list;
    const uint64_t t0 = list.front()->start;
    uint64_t latest_end = t0;
    for (size_t i = 0; i < count; ++i) {
      const KernelSpan* s = list[i];
      sums[i].start += static_cast<double>(s->start - t0);
      sums[i].end += static_cast<double>(s->end - t0);
      sums[i].critical += critical_share_ns(*s, latest_end);
    }
  }
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i = 0; i < count; ++i)
    kernels.push_back({{"kernel", (*named)[i]->name},
                       {"start_us", sums[i].start / used / 1e3},
                       {"end_us", sums[i].end / used / 1e3},
                       {"critical_us", sums[i].critical / used / 1e3}});
  std::ofstream(path) << nlohmann::json{{"steps", used}, {"kernels_per_step", count}, {"kernels", kernels}}.dump(1)
                      << "\n";
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(spans_mutex);
  std::map<uint32_t, std::vector<const KernelSpan*>> steps;
  for (const KernelSpan& s : spans) steps[s.step].push_back(&s);
  if (steps.empty()) {
    std::fprintf(stderr, "kernel_trace: no %skernels recorded\n", graph_only ? "graph " : "");
    return;
  }
  std::map<std::string, NameCost> costs;
  std::vector<double> step_spans;
  double kernels = 0;
  for (auto& [id, list] : steps) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->start < b->start; });
    uint64_t latest_end = list.front()->start;
    for (const KernelSpan* s : list) {
      NameCost& c = costs[s->name];
      c.critical_ns += critical_share_ns(*s, latest_end);
      c.busy_ns += static_cast<double>(s->end - s->start);
      ++c.count;
    }
    step_spans.push_back(static_cast<double>(latest_end - list.front()->start));
    kernels += static_cast<double>(list.size());
  }
  const double n = static_cast<double>(steps.size());
  std::sort(step_spans.begin(), step_spans.end());
  double total_span = 0;
  for (double s : step_spans) total_span += s;
  const double mean_us = total_span / n / 1e3, median_us = step_spans[step_spans.size() / 2] / 1e3;
  std::vector<std::pair<std::string, NameCost>> rows(costs.begin(), costs.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.critical_ns > b.second.critical_ns; });
  std::fprintf(stderr, "kernel_trace: %zu steps, %.1f kernels per step, step span mean %.1f us, median %.1f us\n",
               steps.size(), kernels / n, mean_us, median_us);
  if (dropped_records > 0)
    std::fprintf(stderr, "kernel_trace: WARNING: CUPTI dropped %zu kernel records; the figures below miss them\n",
                 dropped_records);
  std::fprintf(stderr, "%12s %8s %10s %10s %7s  %s\n", "critical us", "share", "busy us", "per call", "calls",
               "kernel (per step)");
  nlohmann::json table = nlohmann::json::array();
  for (auto& [name, c] : rows) {
    const double calls = static_cast<double>(c.count) / n;
    const double critical_us = c.critical_ns / n / 1e3, busy_us = c.busy_ns / n / 1e3;
    std::fprintf(stderr, "%12.1f %7.1f%% %10.1f %10.2f %7.1f  %s\n", critical_us, 100.0 * c.critical_ns / total_span,
                 busy_us, busy_us / calls, calls, name.c_str());
    table.push_back({{"kernel", name},
                     {"critical_us_per_step", critical_us},
                     {"busy_us_per_step", busy_us},
                     {"calls_per_step", calls}});
  }
  if (const char* path = std::getenv("CELLM_KERNEL_TRACE_JSON")) {
    nlohmann::json out{{"steps", steps.size()},
                       {"dropped_records", dropped_records},
                       {"kernels_per_step", kernels / n},
                       {"step_span_us_mean", mean_us},
                       {"step_span_us_median", median_us},
                       {"kernels", table}};
    std::ofstream(path) << out.dump(2) << "\n";
  }
  if (const char* path = std::getenv("CELLM_KERNEL_TRACE_TIMELINE")) write_timeline(steps, path);
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* mode = std::getenv("CELLM_KERNEL_TRACE");
  graph_only = mode == nullptr || std::strcmp(mode, "all") != 0;
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  std::atexit(report);
  return 1;
}
