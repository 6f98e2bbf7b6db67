#include <nn/train.h>

#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

namespace nn::train {

void notify_async(const std::string& command, const std::string& text) {
  if (command.empty()) return;
  // A reader that exits early must not kill the trainer with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  std::thread([command, text] {
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
  }).detach();
}

}  // namespace nn::train
