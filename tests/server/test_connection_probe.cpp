#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "server/connection_probe.h"

namespace cellm::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (peer) getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  else getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// A loopback TCP connection: the server's accepted end and the client's end.
struct Connection {
  int listener = -1, server = -1, client = -1;
  Connection() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listener, 1);
    socklen_t len = sizeof a;
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    client = socket(AF_INET, SOCK_STREAM, 0);
    connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a);
    server = accept(listener, nullptr, nullptr);
  }
  ~Connection() {
    for (int fd : {listener, server, client})
      if (fd >= 0) close(fd);
  }
};

TEST(ConnectionProbe, FindsTheConnectionAndSeesThePeerLeave) {
  Connection c;
  ASSERT_GE(c.server, 0);
  const ConnectionProbe probe = ConnectionProbe::find(port_of(c.server, false), "127.0.0.1", port_of(c.server, true));
  ASSERT_TRUE(probe.found());
  EXPECT_FALSE(probe.peer_closed());
  ASSERT_EQ(write(c.client, "x", 1), 1);  // unread data is not a departure
  EXPECT_FALSE(probe.peer_closed());
  close(c.client);
  c.client = -1;
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {
    closed = probe.peer_closed();
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(closed);
}

TEST(ConnectionProbe, UnknownConnectionsReadAsPresent) {
  Connection c;
  const ConnectionProbe other = ConnectionProbe::find(port_of(c.server, false), "127.0.0.1", 1);
  EXPECT_FALSE(other.found());
  EXPECT_FALSE(other.peer_closed());
  EXPECT_FALSE(ConnectionProbe().peer_closed());
}

}  // namespace
}  // namespace cellm::server
