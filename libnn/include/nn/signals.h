// Graceful stop for long runs: the first SIGTERM, SIGINT or SIGHUP (a scheduler's preemption
// notice, Ctrl-C, a closed terminal or ssh session) only raises a flag, so the training loop can finish its step, save a
// checkpoint and exit; another one a second or more later kills the process at once. One
// within the second is taken for the same request delivered twice (a launcher passing on a
// signal the process also got) and ignored.
#pragma once

namespace nn::train {

class StopSignal {
 public:
  // Installs the SIGTERM, SIGINT and SIGHUP handlers (again, after reset()); SIGINT and
  // SIGHUP stay ignored where they already were (nohup, a background job of a script). The
  // handler stores the first signal's number and time; a later signal, a second or more
  // after it, restores the default disposition and terminates the process as if nothing
  // were installed.
  static void install();
  static bool requested();     // a signal arrived since install() or reset()
  static int signal_number();  // which one (SIGTERM, SIGINT, SIGHUP), 0 if none
  static void reset();         // clears the flag (the next signal is a first one again)
};

}  // namespace nn::train
