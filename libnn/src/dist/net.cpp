#include "dist/net.h"

#include <nn/error.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>

namespace nn::dist::net {

namespace {

using Clock = std::chrono::steady_clock;

// A timeout beyond a century (inf included) never ends, rather than overflowing the clock.
Clock::time_point deadline_after(double seconds) {
  if (!(seconds < 3.2e9)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : int(std::min<int64_t>(ms, 1 << 30));
}
std::string os_error() { return std::strerror(errno); }

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits until `fd` is ready for `events`; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0 && Clock::now() >= deadline) return false;  // else a capped wait ran out
    if (r == 0) continue;
    if (errno != EINTR) NN_ERROR("poll failed: ", os_error());
  }
}

[[noreturn]] void closed(const std::string& peer) {
  NN_ERROR("the connection to ", peer, " closed (did that process exit? see its output)");
}

// One non-blocking step of sending; returns bytes sent (0 when it would block).
size_t send_some(int fd, const char* p, size_t n, const std::string& peer) {
  ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0) return size_t(k);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  if (errno == EPIPE || errno == ECONNRESET) closed(peer);
  NN_ERROR("sending to ", peer, " failed: ", os_error());
}
size_t recv_some(int fd, char* p, size_t n, const std::string& peer) {
  ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
  if (k > 0) return size_t(k);
  if (k == 0) closed(peer);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  if (errno == ECONNRESET) closed(peer);
  NN_ERROR("receiving from ", peer, " failed: ", os_error());
}

[[noreturn]] void timed_out(const std::string& what, double timeout) {
  NN_ERROR("timed out after ", std::round(timeout * 10) / 10, " s waiting for ", what,
           " (is it still running? a longer timeout: --dist-timeout)");
}

}  // namespace

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint32_t resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  NN_CHECK(rc == 0 && res, "cannot resolve the master address '", host, "': ", ::gai_strerror(rc));
  uint32_t ip = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
  ::freeaddrinfo(res);
  return ip;
}

std::string ip_string(uint32_t ip) {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ip;
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

Socket listen_on(int port) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  NN_CHECK(s.valid(), "cannot create a socket: ", os_error());
  int one = 1;
  ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  NN_CHECK(::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
           "cannot listen on port ", port, ": ", os_error(),
           port ? " (another run on this machine? pick another master port)" : "");
  NN_CHECK(::listen(s.fd(), 128) == 0, "cannot listen on port ", port, ": ", os_error());
  return s;
}

int local_port(const Socket& s) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  NN_CHECK(::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len) == 0,
           "getsockname failed: ", os_error());
  return ntohs(addr.sin_port);
}

Socket accept_one(const Socket& listener, double timeout, const std::string& waiting_for,
                  uint32_t* peer_ip, double reported_timeout) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    if (!wait_ready(listener.fd(), POLLIN, deadline))
      timed_out(waiting_for, reported_timeout >= 0 ? reported_timeout : timeout);
    sockaddr_in addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      NN_ERROR("accept failed while waiting for ", waiting_for, ": ", os_error());
    }
    set_nodelay(fd);
    if (peer_ip) *peer_ip = addr.sin_addr.s_addr;
    return Socket(fd);
  }
}

Socket connect_to(uint32_t ip, int port, double timeout, const std::string& peer) {
  const auto deadline = deadline_after(timeout);
  std::string last;
  for (;;) {
    Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    NN_CHECK(s.valid(), "cannot create a socket: ", os_error());
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = ip;
    addr.sin_port = htons(uint16_t(port));
    // Non-blocking, so a host that drops packets cannot hold one attempt for the kernel's
    // two minutes: each attempt waits at most until the deadline.
    const int flags = ::fcntl(s.fd(), F_GETFL, 0);
    ::fcntl(s.fd(), F_SETFL, flags | O_NONBLOCK);
    int rc = ::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno == EINPROGRESS) {
      if (wait_ready(s.fd(), POLLOUT, deadline)) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        errno = err;
        rc = err == 0 ? 0 : -1;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::fcntl(s.fd(), F_SETFL, flags);
      set_nodelay(s.fd());
      return s;
    }
    last = os_error();
    if (Clock::now() >= deadline)
      NN_ERROR("cannot connect to ", peer, " at ", ip_string(ip), ":", port, " within ", timeout,
               " s: ", last);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Deadlines count from the last byte that moved, so a large transfer on a slow link never
// times out while it progresses.
void send_all(const Socket& s, const void* data, size_t n, double timeout, const std::string& peer) {
  auto deadline = deadline_after(timeout);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_ready(s.fd(), POLLOUT, deadline)) timed_out(peer, timeout);
    size_t k = send_some(s.fd(), p, n, peer);
    if (k) deadline = deadline_after(timeout);
    p += k;
    n -= k;
  }
}

void recv_all(const Socket& s, void* data, size_t n, double timeout, const std::string& peer) {
  auto deadline = deadline_after(timeout);
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_ready(s.fd(), POLLIN, deadline)) timed_out(peer, timeout);
    size_t k = recv_some(s.fd(), p, n, peer);
    if (k) deadline = deadline_after(timeout);
    p += k;
    n -= k;
  }
}

void exchange(const Socket& to, const void* send, size_t sn, const std::string& to_peer,
              const Socket& from, void* recv, size_t rn, const std::string& from_peer,
              double timeout) {
  auto deadline = deadline_after(timeout);
  const char* sp = static_cast<const char*>(send);
  char* rp = static_cast<char*>(recv);
  while (sn > 0 || rn > 0) {
    // A finished direction leaves the poll set (fd -1): a socket whose peer has closed keeps
    // reporting POLLHUP, which would make this loop spin without ever timing out.
    pollfd p[2] = {{sn > 0 ? to.fd() : -1, POLLOUT, 0}, {rn > 0 ? from.fd() : -1, POLLIN, 0}};
    int r = ::poll(p, 2, ms_left(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      NN_ERROR("poll failed: ", os_error());
    }
    if (r == 0 && Clock::now() >= deadline) timed_out(rn > 0 ? from_peer : to_peer, timeout);
    if (r == 0) continue;  // a capped wait ran out before the deadline
    if (sn > 0 && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
      size_t k = send_some(to.fd(), sp, sn, to_peer);
      if (k) deadline = deadline_after(timeout);
      sp += k;
      sn -= k;
    }
    if (rn > 0 && (p[1].revents & (POLLIN | POLLERR | POLLHUP))) {
      size_t k = recv_some(from.fd(), rp, rn, from_peer);
      if (k) deadline = deadline_after(timeout);
      rp += k;
      rn -= k;
    }
  }
}

}  // namespace nn::dist::net
