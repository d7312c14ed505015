// check_read_in_child (read_in_child.hpp): fork, read in the child, wait with a deadline.
#include "read_in_child.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include <stoker/core/error.hpp>

namespace stoker::trainer::detail {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {

[[noreturn]] void run_child(const std::function<void()>& read) {
  // Its messages (a sanitizer's report, glibc's heap checks) would read as this process's.
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  try {
    read();
  } catch (...) {  // the parent's own read reports it
  }
  _exit(0);  // not exit(): the parent's atexit handlers and stdio buffers are the parent's
}

std::string signal_name(int signal) {
  const char* d = strsignal(signal);
  return std::string(d ? d : "signal") + ", signal " + std::to_string(signal);
}

}  // namespace

void check_read_in_child(const std::string& where, const std::function<void()>& read, std::chrono::seconds limit) {
  const std::lock_guard lock(hdf5_mutex());
  const pid_t pid = fork();
  if (pid < 0) throw IoError(where + ": cannot start the process that checks the file: " + std::strerror(errno));
  if (pid == 0) run_child(read);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw IoError(where + ": lost the process that checks the file");
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      throw IoError(where + ": reading the file did not end within " + std::to_string(limit.count()) +
                    " s (a damaged HDF5 file can make libhdf5 loop); stoker refuses it");
    }
    std::this_thread::sleep_for(pause);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how =
      WIFSIGNALED(status) ? signal_name(WTERMSIG(status)) : "exit status " + std::to_string(WEXITSTATUS(status));
  throw IoError(where + ": the file is damaged: libhdf5 crashed reading it (" + how +
                ", in a process of its own); stoker refuses it");
}

}  // namespace stoker::trainer::detail
