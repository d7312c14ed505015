// check_read_in_child (read_in_child.hpp): fork, read in the child, wait with a deadline.
#include "read_in_child.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <thread>

#include <stoker/core/error.hpp>

#include "import.hpp"

namespace stoker::trainer::detail {

std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

namespace {

// The bytes of private data this process has mapped (VmData), 0 when unknown.
std::uint64_t data_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmData:", 0) == 0) return std::stoull(line.substr(7)) * 1024;  // kB
  return 0;
}

// An exception of the read, for the parent: a letter for its type, then its message.
std::string encode(const std::exception_ptr& thrown, const std::string& where) {
  try {
    try {
      std::rethrow_exception(thrown);
    } catch (...) {
      rethrow_as_load_error(where);  // the types and messages the read in this process would give
    }
  } catch (const InvalidArgument& e) {
    return std::string("A") + e.what();
  } catch (const DatasetError& e) {
    return std::string("D") + e.what();
  } catch (const IoError& e) {
    return std::string("I") + e.what();
  } catch (const BadAlloc& e) {
    return std::string("M") + e.what();
  } catch (const std::exception& e) {
    return std::string("E") + e.what();
  }
  return "E" + where + ": cannot load the model";
}

[[noreturn]] void run_child(const std::function<void()>& read, const std::string& where, std::uint64_t memory,
                            int report) {
  // Its messages (a sanitizer's report, glibc's heap checks) would read as this process's.
  const int null = open("/dev/null", O_WRONLY);
  if (null >= 0) {
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  // A damaged file can declare sizes libhdf5 allocates without checking (a variable-length string
  // of 2 GB in a 100 KB file): the child's new allocations stop at `memory`.
  if (const std::uint64_t now = data_bytes(); now > 0) {
    const rlim_t cap = static_cast<rlim_t>(now + memory);
    const rlimit data{cap, cap};
    setrlimit(RLIMIT_DATA, &data);
  }
  try {
    read();
  } catch (...) {
    // Within the pipe's buffer, which the parent reads only once this process has exited.
    const std::string message = encode(std::current_exception(), where).substr(0, 4096);
    [[maybe_unused]] const ssize_t written = write(report, message.data(), message.size());
    _exit(2);
  }
  _exit(0);  // not exit(): the parent's atexit handlers and stdio buffers are the parent's
}

// Throws what the child's read threw, as its type.
[[noreturn]] void rethrow_childs(const std::string& encoded, const std::string& where, std::uint64_t memory) {
  const std::string message = encoded.empty() ? where + ": cannot load the model" : encoded.substr(1);
  switch (encoded.empty() ? 'E' : encoded[0]) {
    case 'A': throw InvalidArgument(message);
    case 'D': throw DatasetError(message);
    case 'I': throw IoError(message);
    case 'M':
      throw IoError(where + ": reading the file needs more than the " + std::to_string(memory >> 20) +
                    " MiB allowed for a file of its size (a damaged file can declare sizes it does not hold); "
                    "stoker refuses it");
    default: throw Error(message);
  }
}

std::string signal_name(int signal) {
  const char* d = strsignal(signal);
  return std::string(d ? d : "signal") + ", signal " + std::to_string(signal);
}

}  // namespace

void check_read_in_child(const std::filesystem::path& file, const std::function<void()>& read,
                         std::chrono::seconds limit) {
  const std::string where = file.string();
  std::error_code size_error;
  const std::uintmax_t size = std::filesystem::file_size(file, size_error);
  const std::uint64_t memory = kReadMemoryBase + kReadMemoryPerFileByte * (size_error ? 0 : size);
  const std::lock_guard lock(hdf5_mutex());
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0)
    throw IoError(where + ": cannot start the process that checks the file: " + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    close(report[0]);
    close(report[1]);
    throw IoError(where + ": cannot start the process that checks the file: " + std::strerror(errno));
  }
  if (pid == 0) {
    close(report[0]);
    run_child(read, where, memory, report[1]);
  }
  close(report[1]);
  // The child's report is a message at most, written before it exits: read once it has.
  struct ReportEnd {
    int fd;
    ~ReportEnd() { close(fd); }
  } report_end{report[0]};
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
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {  // the read threw: that error, as this process's would be
    std::string encoded;
    char buffer[4096];
    for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;)
      encoded.append(buffer, static_cast<std::size_t>(n));
    rethrow_childs(encoded, where, memory);
  }
  const std::string how =
      WIFSIGNALED(status) ? signal_name(WTERMSIG(status)) : "exit status " + std::to_string(WEXITSTATUS(status));
  throw IoError(where + ": the file is damaged: libhdf5 crashed reading it (" + how +
                ", in a process of its own); stoker refuses it");
}

}  // namespace stoker::trainer::detail
