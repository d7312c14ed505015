#include "rank_launcher.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "stoker/core/error.hpp"
#include "stoker/training/collective.hpp"

namespace stoker::app {
namespace {

// This process's executable and arguments, as the kernel has them.
std::vector<std::string> own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t start = 0; start < all.size();) {
    const std::size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (args.empty()) throw Error("cannot read this process's command line (/proc/self/cmdline)");
  args[0] = std::filesystem::read_symlink("/proc/self/exe").string();  // argv[0] may be a bare name
  return args;
}

}  // namespace

std::vector<std::string> one_rank_per_gpu_command(const std::string& launcher, int ranks,
                                                  const std::vector<std::string>& command) {
  // Open MPI's mpirun: as many ranks as GPUs whatever the core count, free to use every core (the
  // loader's threads), shared memory between them (one machine), and allowed when the user runs
  // stoker as root (a container), which mpirun refuses by default.
  std::vector<std::string> args = {launcher, "-np", std::to_string(ranks), "--oversubscribe", "--bind-to", "none",
                                   "--mca",  "btl", "self,vader"};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

void restart_as_one_rank_per_gpu(int ranks) {
  const std::string launcher = training::mpi_launcher();
  if (launcher.empty()) {
    throw Error(training::mpi_available()
                    ? "--device with several GPUs starts one rank per GPU with Open MPI's mpirun, which is not "
                      "installed (Debian: openmpi-bin)"
                    : "--device with several GPUs starts one rank per GPU over MPI, and this stoker was built "
                      "without it (configure with -DSTOKER_DISTRIBUTED=ON; Open MPI: scripts/install-deps.sh)");
  }
  const std::vector<std::string> args = one_rank_per_gpu_command(launcher, ranks, own_command());
  std::string shown;
  for (const auto& a : args) shown += (shown.empty() ? "" : " ") + a;
  std::printf("one rank per GPU: %s\n", shown.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  throw Error("cannot start " + launcher + ": " + std::strerror(errno));
}

}  // namespace stoker::app
