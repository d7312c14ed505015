#include "stoker/training/collective.hpp"

#include <cstdlib>
#include <string>

#include "stoker/core/error.hpp"

namespace stoker::training {
namespace {

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string describe() const override { return "single process"; }
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  void broadcast(std::span<std::byte>, int root) override {
    if (root != 0) throw InvalidArgument("broadcast: root " + std::to_string(root) + " of a single process");
  }
  void barrier() override {}
  void set_peer_timeout(std::chrono::duration<double>) override {}
  double seconds_exchanging() const override { return 0; }
  [[noreturn]] void abort(int exit_code) override { std::exit(exit_code); }
};

// The world size an MPI launcher exported, or 0 when none did.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  }
  return 0;
}

}  // namespace

std::shared_ptr<Collective> single_process() { return std::make_shared<SingleProcess>(); }

bool launched_by_mpi() {
  return launcher_world_size() > 0 || std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("PMIX_RANK");
}

std::shared_ptr<Collective> launcher_collective() {
  if (!launched_by_mpi()) return single_process();
  if (mpi_available()) return mpi_collective();
  if (launcher_world_size() > 1)
    throw Error("an MPI launcher started " + std::to_string(launcher_world_size()) +
                " processes, but this stoker was built without MPI (configure with -DSTOKER_DISTRIBUTED=ON and "
                "Open MPI installed: scripts/install-deps.sh)");
  return single_process();
}

#ifndef STOKER_HAVE_MPI
bool mpi_available() { return false; }

std::string mpi_launcher() { return {}; }

std::shared_ptr<Collective> mpi_collective() {
  throw Error(
      "this stoker was built without MPI: configure with -DSTOKER_DISTRIBUTED=ON (Open MPI: "
      "scripts/install-deps.sh)");
}
#endif

}  // namespace stoker::training
