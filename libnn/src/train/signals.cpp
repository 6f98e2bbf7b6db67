#include <nn/error.h>
#include <nn/signals.h>

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace nn::train {

namespace {

// Written from a signal handler: must be lock-free to be async-signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  int saved_errno = errno;  // sigaction may set it; the interrupted code must not notice
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);  // the first signal is the one reported
  // sigaction is async-signal-safe; SA_RESETHAND would only reset the signal received, and
  // Ctrl-C after a SIGTERM must kill too.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGTERM, &dfl, nullptr);
  sigaction(SIGINT, &dfl, nullptr);
  errno = saved_errno;
}

}  // namespace

void StopSignal::install() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // Block the other stop signal while the handler runs, so the two cannot interleave.
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  sa.sa_flags = SA_RESTART;  // a blocking read in the loop should not fail with EINTR
  for (int sig : {SIGTERM, SIGINT})
    NN_CHECK(sigaction(sig, &sa, nullptr) == 0, "StopSignal: cannot install the handler for ",
             strsignal(sig), ": ", std::strerror(errno));
}

bool StopSignal::requested() { return g_signal.load() != 0; }
int StopSignal::signal_number() { return g_signal.load(); }
void StopSignal::reset() { g_signal.store(0); }

}  // namespace nn::train
