// The MPI collective (built with STOKER_DISTRIBUTED). Sums are not MPI_Allreduce's, whose order of
// additions depends on the library's algorithm choice: every rank gathers every rank's buffer and
// adds them in rank order, so all ranks hold bit-identical results, run after run. For the
// buffers exchanged here (a head's weights: thousands to a few million floats) the gather costs
// little more than a reduction.
//
// Every operation is MPI's non-blocking one, waited for with a deadline (set_peer_timeout): a
// blocking MPI call waits for ever on a peer that hangs or was stopped, and mpirun only notices
// peers that exit.
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "stoker/core/error.hpp"
#include "stoker/training/collective.hpp"

namespace stoker::training {
namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string(call) + ": " + std::string(text, static_cast<std::size_t>(length)));
}

template <class T>
MPI_Datatype datatype();
template <>
MPI_Datatype datatype<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype datatype<double>() {
  return MPI_DOUBLE;
}

class Mpi final : public Collective {
 public:
  Mpi() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_ = true;
    }
    // Errors come back as return codes (an exception naming the call), not as an abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    // This rank's place among the ranks on its machine (by MPI's processor name), through the
    // waited gather: MPI_Comm_split_type would wait for ever on a peer stopped at start.
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
    const std::vector<std::string> machines = allgather(std::string(name, static_cast<std::size_t>(length)));
    for (int r = 0; r < rank_; ++r)
      local_rank_ += machines[static_cast<std::size_t>(r)] == machines[static_cast<std::size_t>(rank_)] ? 1 : 0;
  }
  ~Mpi() override {
    int done = 0;
    MPI_Finalized(&done);
    if (owns_ && !done) MPI_Finalize();
  }
  Mpi(const Mpi&) = delete;
  Mpi& operator=(const Mpi&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string v(version, static_cast<std::size_t>(length));
    if (const auto end = v.find_first_of(",\n"); end != std::string::npos) v.resize(end);
    return "MPI (" + v + "), rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

  void allreduce_sum(std::span<float> values) override { sum(values); }
  void allreduce_sum(std::span<double> values) override { sum(values); }

  std::vector<std::string> allgather(const std::string& mine) override {
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw InvalidArgument("allgather: " + std::to_string(mine.size()) + " bytes, more than MPI counts");
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD, &request), "MPI_Iallgather");
    wait(request, "MPI_Iallgather");
    std::vector<int> offsets(counts.size());
    long long total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += counts[r];
    }
    if (total > std::numeric_limits<int>::max())
      throw InvalidArgument("allgather: " + std::to_string(total) + " bytes in all, more than MPI counts");
    std::string all(static_cast<std::size_t>(total), '\0');
    check(MPI_Iallgatherv(mine.data(), count, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE,
                          MPI_COMM_WORLD, &request),
          "MPI_Iallgatherv");
    wait(request, "MPI_Iallgatherv");
    std::vector<std::string> out;
    for (std::size_t r = 0; r < counts.size(); ++r)
      out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(counts[r])));
    return out;
  }

  void broadcast(std::span<std::byte> bytes, int root) override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD, &request),
          "MPI_Ibcast");
    wait(request, "MPI_Ibcast");
  }
  void barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait(request, "MPI_Ibarrier");
  }
  void set_peer_timeout(std::chrono::duration<double> limit) override {
    if (!(limit.count() > 0)) throw InvalidArgument("the peer timeout must be positive");
    peer_timeout_ = limit;
  }
  double seconds_exchanging() const override { return exchanging_.count(); }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::exit(exit_code);  // MPI_Abort does not return; if it did, this rank still ends
  }

 private:
  using Clock = std::chrono::steady_clock;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool owns_ = false;
  std::chrono::duration<double> peer_timeout_{300.0};
  std::chrono::duration<double> exchanging_{0.0};

  // Polls `request` to completion: at full speed first (an exchange between ranks that arrive
  // together takes microseconds), then every millisecond, so that a rank waiting minutes for a
  // slow peer leaves its core to the loader's threads. MPI's non-blocking operations progress
  // inside MPI_Test. Past the peer timeout it throws PeerTimeout, naming the operation.
  void wait(MPI_Request& request, const char* call) {
    const Clock::time_point start = Clock::now();
    for (int done = 0;;) {
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
      if (done) break;
      const auto waited = Clock::now() - start;
      if (waited > peer_timeout_) no_answer(call);
      if (waited > std::chrono::milliseconds(50)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    exchanging_ += Clock::now() - start;
  }

  [[noreturn]] void no_answer(const char* call) const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.0f", peer_timeout_.count());
    throw PeerTimeout(std::string("no answer from the other ranks for ") + seconds + " s in " + call +
                      " (the peer timeout): a rank has hung, stopped or lost its connection");
  }

  template <class T>
  void sum(std::span<T> values) {
    if (size_ == 1 || values.empty()) return;
    if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw InvalidArgument("allreduce_sum: " + std::to_string(values.size()) + " values, more than MPI counts");
    const int n = static_cast<int>(values.size());
    std::vector<T> all(values.size() * static_cast<std::size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(values.data(), n, datatype<T>(), all.data(), n, datatype<T>(), MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
    wait(request, "MPI_Iallgather");
    for (std::size_t i = 0; i < values.size(); ++i) {
      T s = all[i];
      for (std::size_t r = 1; r < static_cast<std::size_t>(size_); ++r) s += all[r * values.size() + i];
      values[i] = s;
    }
  }
};

}  // namespace

bool mpi_available() { return true; }

std::string mpi_launcher() {
  // The one next to the MPI this build found; else whichever is first on PATH.
  if (const std::filesystem::path built = STOKER_MPIEXEC; !built.empty() && ::access(built.c_str(), X_OK) == 0)
    return built;
  if (const char* path = std::getenv("PATH")) {
    for (std::string_view rest = path; !rest.empty();) {
      const std::size_t colon = rest.find(':');
      const std::filesystem::path candidate = std::filesystem::path(rest.substr(0, colon)) / "mpirun";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  return {};
}

std::shared_ptr<Collective> mpi_collective() {
  // One per process: MPI is initialised once and finalised when the last user lets it go at exit.
  static std::mutex mutex;
  static std::shared_ptr<Collective> world;
  std::lock_guard lock(mutex);
  if (!world) world = std::make_shared<Mpi>();
  return world;
}

}  // namespace stoker::training
