#include "core/process_memory.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace cellm {
namespace {

size_t kib_field(const std::string& line) {
  std::istringstream in(line.substr(line.find(':') + 1));
  size_t kib = 0;
  in >> kib;
  return kib * 1024;
}

}  // namespace

ResidentMemory resident_memory() {
  ResidentMemory m;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss = kib_field(line);
    if (line.rfind("VmHWM:", 0) == 0) m.peak_rss = kib_field(line);
  }
  return m;
}

size_t mapped_file_resident_bytes(const std::string& path) {
  std::error_code ec;
  const std::string target = std::filesystem::weakly_canonical(path, ec).string();
  if (ec) return 0;
  std::ifstream smaps("/proc/self/smaps");
  size_t total = 0;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping header is "start-end perms offset dev inode [path]"; its fields follow.
    const bool header = !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
                        line.find('-') < line.find(' ');
    if (header) {
      const size_t slash = line.find('/');
      inside = slash != std::string::npos && line.substr(slash) == target;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      total += kib_field(line);
    }
  }
  return total;
}

}  // namespace cellm
