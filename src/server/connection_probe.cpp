#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace cellm::server {
namespace {

struct Endpoint {
  std::string addr;
  int port = -1;
};

bool endpoint_of(const sockaddr_storage& sa, Endpoint& out) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    out = {text, ntohs(in.sin_port)};
    return true;
  }
  if (sa.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(sa);
    inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    out = {text, ntohs(in6.sin6_port)};
    return true;
  }
  return false;
}

bool is_connection(int fd, int local_port, const std::string& remote_addr, int remote_port) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  Endpoint local, peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 || !endpoint_of(sa, local)) return false;
  if (local.port != local_port) return false;
  len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 || !endpoint_of(sa, peer)) return false;
  return peer.port == remote_port && peer.addr == remote_addr;
}

}  // namespace

ConnectionProbe ConnectionProbe::find(int local_port, const std::string& remote_addr, int remote_port) {
  if (local_port < 0 || remote_port < 0) return {};
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return {};
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (is_connection(static_cast<int>(fd), local_port, remote_addr, remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return ConnectionProbe(found);
}

bool ConnectionProbe::peer_closed() const {
  if (fd_ < 0) return false;
  // POLLRDHUP (Linux) reports the peer's close even behind unread data, which a peek at the
  // next byte would not see.
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) < 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace cellm::server
