// TCP plumbing for the process group: blocking IPv4 sockets with deadlines, and a
// full-duplex exchange (send to one peer while receiving from another, so a ring of ranks
// never waits on itself). Every failure is an nn::Error naming the peer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nn::dist::net {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }
  void close();
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The IPv4 address of `host` (a name or dotted quad), in network byte order.
uint32_t resolve(const std::string& host);
std::string ip_string(uint32_t ip);

// Listens on all interfaces; port 0 picks a free one.
Socket listen_on(int port);
int local_port(const Socket& s);
// Accepts one connection, waiting at most `timeout` seconds; `peer_ip` gets its address.
// A timeout error reports `reported_timeout` seconds when given (the whole wait of which
// this is the rest).
Socket accept_one(const Socket& listener, double timeout, const std::string& waiting_for,
                  uint32_t* peer_ip = nullptr, double reported_timeout = -1);
// Connects, retrying until `timeout` seconds have passed (the peer may not listen yet).
Socket connect_to(uint32_t ip, int port, double timeout, const std::string& peer);

// `peer` names the other side in errors ("rank 2").
void send_all(const Socket& s, const void* data, size_t n, double timeout, const std::string& peer);
void recv_all(const Socket& s, void* data, size_t n, double timeout, const std::string& peer);
// Sends `sn` bytes on `to` while receiving `rn` bytes from `from`.
void exchange(const Socket& to, const void* send, size_t sn, const std::string& to_peer,
              const Socket& from, void* recv, size_t rn, const std::string& from_peer,
              double timeout);

}  // namespace nn::dist::net
