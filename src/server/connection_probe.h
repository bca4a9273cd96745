#pragma once
// Tells a handler whether its client is still there while the generation runs, so that a
// client that disconnects cancels its generation and frees its cells even when nothing is
// being written to it (a non-streaming request, or a stream waiting for its first token).
//
// cpp-httplib 0.11 (Debian 12) gives a handler neither its socket nor a "connection closed"
// test, only the addresses of the connection. The probe finds the connection's socket among
// this process's descriptors by those addresses (local port, peer address and port identify
// one TCP connection) and polls it: an orderly close or a reset means the client left.
// A client that half-closes (shutdown(SHUT_WR)) while waiting reads as gone too; HTTP
// clients do not do that.
#include <string>

namespace cellm::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;  // finds nothing: never reports the peer gone
  // The socket of the TCP connection between local_port and remote_addr:remote_port.
  static ConnectionProbe find(int local_port, const std::string& remote_addr, int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer closed or reset the connection. Data the peer sent stays unread.
  bool peer_closed() const;

 private:
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  int fd_ = -1;  // not owned: the HTTP server closes it after the handler returns
};

}  // namespace cellm::server
