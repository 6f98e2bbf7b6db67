// Graceful stop for long runs: the first SIGTERM or SIGINT (a scheduler's preemption
// notice, Ctrl-C) only raises a flag, so the training loop can finish its step, save a
// checkpoint and exit; a second one kills the process at once.
#pragma once

namespace nn::train {

class StopSignal {
 public:
  // Installs the SIGTERM and SIGINT handlers (again, after a signal has disarmed them).
  // The handler only stores the signal number and restores the default disposition of
  // both signals, so a second signal terminates the process as if nothing were installed.
  static void install();
  static bool requested();     // a signal arrived since install() or reset()
  static int signal_number();  // which one (SIGTERM, SIGINT), 0 if none
  static void reset();         // clears the flag; does not re-install the handlers
};

}  // namespace nn::train
