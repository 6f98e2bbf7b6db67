#include <nn/train.h>

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace nn::train {

namespace {
struct InFlight {
  std::mutex mu;
  std::condition_variable done;
  int count = 0;
};
InFlight& in_flight() {
  static InFlight* f = new InFlight;  // never destroyed: detached threads may outlive statics
  return *f;
}
}  // namespace

void notify_async(const std::string& command, const std::string& text) {
  if (command.empty()) return;
  // A reader that exits early must not kill the trainer with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  auto finished = [] {  // however the notification ends, or if it never starts
    std::lock_guard<std::mutex> lock(in_flight().mu);
    in_flight().count--;
    in_flight().done.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(in_flight().mu);
    in_flight().count++;
  }
  auto run = [command, text, finished] {
    struct Finished {
      decltype(finished) f;
      ~Finished() { f(); }
    } on_exit{finished};
    FILE* p = popen(command.c_str(), "w");
    if (!p) {
      std::fprintf(stderr, "warning: notify command could not start: %s\n", std::strerror(errno));
      return;
    }
    std::fwrite(text.data(), 1, text.size(), p);
    int status = pclose(p);
    if (status == -1) {
      std::fprintf(stderr, "warning: notify command failed: %s\n", std::strerror(errno));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "warning: notify command exited with status %d\n", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "warning: notify command was killed by signal %d\n", WTERMSIG(status));
    }
  };
  try {
    std::thread(run).detach();
  } catch (const std::system_error& e) {  // no thread to be had (a process or thread limit)
    finished();
    std::fprintf(stderr, "warning: notify command not run: cannot start a thread: %s\n", e.what());
  }
}

bool wait_for_notifications(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(in_flight().mu);
  return in_flight().done.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                                   [] { return in_flight().count == 0; });
}

}  // namespace nn::train
