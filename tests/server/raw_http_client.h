#pragma once
// A bare HTTP/1.1 client over a loopback TCP socket, for tests that must decide exactly when
// the client goes away: it sends one request, reads what has arrived, and closes the socket
// whenever the test says (an HTTP library would hide or delay that).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace cellm::test {

class RawHttpClient {
 public:
  RawHttpClient(int port, const std::string& path, const nlohmann::json& body) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ADD_FAILURE() << "cannot connect to 127.0.0.1:" << port;
      close_now();
      return;
    }
    const std::string payload = body.dump();
    std::ostringstream req;
    req << "POST " << path << " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        << "Connection: close\r\nContent-Length: " << payload.size() << "\r\n\r\n"
        << payload;
    const std::string text = req.str();
    if (send(fd_, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size()))
      ADD_FAILURE() << "cannot send the request";
  }
  ~RawHttpClient() { close_now(); }
  RawHttpClient(const RawHttpClient&) = delete;
  RawHttpClient& operator=(const RawHttpClient&) = delete;

  // Reads until `done(received so far)` or the peer closes or `limit` passes; true if done.
  template <class Done>
  bool read_until(Done done, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done(received_)) {
      if (fd_ < 0 || std::chrono::steady_clock::now() > deadline) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return done(received_);
      received_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // The whole response (the server closes after it: Connection: close).
  std::string read_all() {
    read_until([](const std::string&) { return false; });
    return received_;
  }
  // Leaves: the socket is closed without reading what is left.
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  std::string received_;
};

// The JSON body of a complete HTTP response (headers, then the body to the end).
inline nlohmann::json body_of(const std::string& response) {
  const size_t start = response.find("\r\n\r\n");
  if (start == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(response.substr(start + 4), nullptr, /*allow_exceptions=*/false);
}

// The status code of an HTTP response, 0 before its status line arrived.
inline int status_of(const std::string& response) {
  if (response.size() < 12 || response.compare(0, 5, "HTTP/") != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

// The payloads of the SSE events received so far ("data: X" lines; [DONE] included). Chunk
// framing lines of the transfer encoding never start with "data: ".
inline std::vector<std::string> sse_events(const std::string& response) {
  std::vector<std::string> out;
  std::istringstream lines(response);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

// The text the content chunks of a stream carried so far (chat deltas or completion text).
inline std::string sse_text(const std::string& response) {
  std::string text;
  for (const std::string& e : sse_events(response)) {
    const auto j = nlohmann::json::parse(e, nullptr, false);
    if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
    const auto& c = j["choices"][0];
    if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
      text += c["delta"]["content"].get<std::string>();
    else if (c.contains("text") && c["text"].is_string())
      text += c["text"].get<std::string>();
  }
  return text;
}

}  // namespace cellm::test
