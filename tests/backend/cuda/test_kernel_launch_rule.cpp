// The rule of kernel_launch.cuh, checked on the sources (no GPU needed, so CI checks it): every
// kernel of the CUDA backend is launched through launch_kernel, which lets it start before the
// kernel ahead of it has finished, and so every kernel must call wait_for_inputs() before it
// touches what another kernel writes. A kernel without the wait would read stale activations
// now and then, a failure no test could be relied on to catch.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Source {
  std::string name;
  std::string text;
};

std::vector<Source> cuda_sources() {
  std::vector<Source> out;
  for (const auto& entry : fs::directory_iterator(fs::path(CELLM_SOURCE_DIR) / "src/backend/cuda")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cu" && ext != ".cuh") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    out.push_back({entry.path().filename().string(), text.str()});
  }
  return out;
}

// The body of the function whose declaration starts at `at`: from its first '{' to the matching
// '}' (kernel bodies hold no braces inside strings or character literals).
std::string body_from(const std::string& text, size_t at) {
  const size_t open = text.find('{', at);
  if (open == std::string::npos) return {};
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(open, i - open + 1);
  }
  return {};
}

TEST(CudaKernelLaunchRule, TheSourcesAreFound) {
  // Guards the checks below against passing on an empty directory listing.
  EXPECT_GE(cuda_sources().size(), 10u);
}

TEST(CudaKernelLaunchRule, EveryKernelWaitsForItsInputs) {
  int kernels = 0;
  for (const Source& s : cuda_sources()) {
    for (size_t at = s.text.find("__global__"); at != std::string::npos; at = s.text.find("__global__", at + 1)) {
      ++kernels;
      const std::string body = body_from(s.text, at);
      const auto line = 1 + std::count(s.text.begin(), s.text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
      EXPECT_NE(body.find("wait_for_inputs()"), std::string::npos)
          << s.name << ":" << line << ": this kernel never calls wait_for_inputs()";
    }
  }
  EXPECT_GE(kernels, 15);
}

TEST(CudaKernelLaunchRule, NoKernelIsLaunchedWithTripleChevrons) {
  for (const Source& s : cuda_sources())
    EXPECT_EQ(s.text.find("<<<"), std::string::npos) << s.name << " launches a kernel without launch_kernel";
}

}  // namespace
