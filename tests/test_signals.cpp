// StopSignal: the first SIGTERM/SIGINT sets a flag, the second kills.
#include <nn/signals.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

using nn::train::StopSignal;

namespace {
bool handler_is_default(int sig) {
  struct sigaction sa {};
  sigaction(sig, nullptr, &sa);
  return sa.sa_handler == SIG_DFL;
}
}  // namespace

TEST_CASE("StopSignal turns the first SIGTERM into a flag", "[train][signals]") {
  StopSignal::reset();
  StopSignal::install();
  REQUIRE_FALSE(StopSignal::requested());
  REQUIRE(StopSignal::signal_number() == 0);
  REQUIRE_FALSE(handler_is_default(SIGTERM));
  REQUIRE_FALSE(handler_is_default(SIGINT));

  raise(SIGTERM);  // the process survives
  REQUIRE(StopSignal::requested());
  REQUIRE(StopSignal::signal_number() == SIGTERM);
  // both disarmed, so a second signal of either kind kills
  REQUIRE(handler_is_default(SIGTERM));
  REQUIRE(handler_is_default(SIGINT));

  StopSignal::reset();
  REQUIRE_FALSE(StopSignal::requested());
  StopSignal::install();  // re-armed
  raise(SIGINT);
  REQUIRE(StopSignal::signal_number() == SIGINT);
  StopSignal::reset();
}

TEST_CASE("StopSignal lets a second signal kill the process", "[train][signals]") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // child: async-signal-safe calls only until _exit
    StopSignal::install();
    raise(SIGINT);
    if (!StopSignal::requested()) _exit(3);
    raise(SIGTERM);
    _exit(4);  // not reached: the second signal terminates
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("status " << status);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGTERM);
}
