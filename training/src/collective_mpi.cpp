// The MPI collective (built with STOKER_DISTRIBUTED). Sums are not MPI_Allreduce's, whose order of
// additions depends on the library's algorithm choice: every rank gathers every rank's buffer and
// adds them in rank order, so all ranks hold bit-identical results, run after run. For the
// buffers exchanged here (a head's weights: thousands to a few million floats) the gather costs
// little more than a reduction.
#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
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
    check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    std::vector<int> offsets(counts.size());
    long long total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += counts[r];
    }
    if (total > std::numeric_limits<int>::max())
      throw InvalidArgument("allgather: " + std::to_string(total) + " bytes in all, more than MPI counts");
    std::string all(static_cast<std::size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), count, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (std::size_t r = 0; r < counts.size(); ++r)
      out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(counts[r])));
    return out;
  }

  void broadcast(std::span<std::byte> bytes, int root) override {
    check(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::exit(exit_code);  // MPI_Abort does not return; if it did, this rank still ends
  }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;

  template <class T>
  void sum(std::span<T> values) {
    if (size_ == 1 || values.empty()) return;
    if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw InvalidArgument("allreduce_sum: " + std::to_string(values.size()) + " values, more than MPI counts");
    const int n = static_cast<int>(values.size());
    std::vector<T> all(values.size() * static_cast<std::size_t>(size_));
    check(MPI_Allgather(values.data(), n, datatype<T>(), all.data(), n, datatype<T>(), MPI_COMM_WORLD),
          "MPI_Allgather");
    for (std::size_t i = 0; i < values.size(); ++i) {
      T s = all[i];
      for (std::size_t r = 1; r < static_cast<std::size_t>(size_); ++r) s += all[r * values.size() + i];
      values[i] = s;
    }
  }
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Collective> mpi_collective() {
  // One per process: MPI is initialised once and finalised when the last user lets it go at exit.
  static std::mutex mutex;
  static std::shared_ptr<Collective> world;
  std::lock_guard lock(mutex);
  if (!world) world = std::make_shared<Mpi>();
  return world;
}

}  // namespace stoker::training
