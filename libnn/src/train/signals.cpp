#include <nn/error.h>
#include <nn/signals.h>

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace nn::train {

namespace {

// Written from a signal handler: must be lock-free to be async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);

// A second signal within this long of the first is the same request delivered twice (a
// launcher passing on a SIGTERM the process also got from the system, a Ctrl-C reaching a
// whole process group), not an impatient user.
constexpr int64_t kDuplicateNs = 1'000'000'000;

// The signals handled, and those of them this process handles (a bit per signal): SIGINT and
// SIGHUP left ignored where the process started with them ignored (nohup; a background job
// of a script), as shells do.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
std::atomic<uint32_t> g_installed{0};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  int saved_errno = errno;  // the interrupted code must not notice
  const int64_t now = monotonic_ns();
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {  // the first signal is the one reported
    g_first_ns.store(now);
  } else if (const int64_t first = g_first_ns.load(); first != 0 && now - first >= kDuplicateNs) {
    // (first == 0: the first signal's handler, on another thread, has not stored its time
    // yet; this one is then within the second.)
    // A later one: die of it as if nothing were installed. It is blocked while this handler
    // runs, so raise() leaves it pending, delivered with the default action on return.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    const uint32_t installed = g_installed.load();
    for (int s : kStopSignals)
      if (installed & (1u << s)) sigaction(s, &dfl, nullptr);
    raise(sig);
  }
  errno = saved_errno;
}

}  // namespace

void StopSignal::install() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // Block the other stop signals while the handler runs, so they cannot interleave.
  for (int sig : kStopSignals) sigaddset(&sa.sa_mask, sig);
  sa.sa_flags = SA_RESTART;  // a blocking read in the loop should not fail with EINTR
  for (int sig : kStopSignals) {
    struct sigaction old {};
    NN_CHECK(sigaction(sig, nullptr, &old) == 0, "StopSignal: cannot read the handler of ",
             strsignal(sig), ": ", std::strerror(errno));
    if (sig != SIGTERM && old.sa_handler == SIG_IGN) continue;  // nohup, a background job
    NN_CHECK(sigaction(sig, &sa, nullptr) == 0, "StopSignal: cannot install the handler for ",
             strsignal(sig), ": ", std::strerror(errno));
    g_installed.fetch_or(1u << sig);
  }
}

bool StopSignal::requested() { return g_signal.load() != 0; }
int StopSignal::signal_number() { return g_signal.load(); }
void StopSignal::reset() { g_signal.store(0); }

}  // namespace nn::train
