#pragma once
// The process's resident memory as Linux reports it (/proc/self/status and smaps), to show in
// reports that weights are held once: the resident bytes of a mapped model file do not grow
// with the number of sessions.
#include <cstddef>
#include <string>

namespace cellm {

struct ResidentMemory {
  size_t rss = 0;       // VmRSS
  size_t peak_rss = 0;  // VmHWM
};

ResidentMemory resident_memory();  // zeros where /proc is unavailable
// Resident bytes of every mapping of `path` (0 when not mapped or unknown).
size_t mapped_file_resident_bytes(const std::string& path);

}  // namespace cellm
