// What the ranks of a data-parallel run exchange (docs/distributed.md): their number and place,
// sums of float and double buffers, gathers of byte strings, broadcasts and barriers. Every rank
// calls each operation in the same order with buffers of the same size.
//
// Sums are taken in rank order (rank 0's values + rank 1's + ...), the same on every rank, so two
// runs with the same world size are bit-identical and every rank holds the same weights.
//
//   std::shared_ptr<Collective> c = launcher_collective();  // MPI under mpirun/srun, else one process
//   c->allreduce_sum(gradients);                            // every rank: the sum over the ranks
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/core/error.hpp"

namespace stoker::training {

// An operation got no answer from the other ranks within the peer timeout: a rank hung, was
// stopped or lost its connection. The operation is still in flight (MPI cannot cancel a
// collective), so the collective must not be used again: end every rank with abort().
class PeerTimeout : public Error {
 public:
  using Error::Error;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's place among the ranks on its machine (0 for one process): which GPU it takes.
  virtual int local_rank() const = 0;
  // "single process", or the library and its version.
  virtual std::string describe() const = 0;

  // In place: each element becomes the sum over the ranks, added in rank order.
  virtual void allreduce_sum(std::span<float> values) = 0;
  virtual void allreduce_sum(std::span<double> values) = 0;
  // Every rank's bytes (of any length), indexed by rank, on every rank.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // `bytes` becomes root's on every rank (its size must be the same on every rank).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  virtual void barrier() = 0;
  // How long one operation may wait for the other ranks: past it the operation throws PeerTimeout
  // (a peer that hangs or stopped without exiting would otherwise keep every rank waiting for
  // ever). One process: no effect.
  virtual void set_peer_timeout(std::chrono::duration<double> limit) = 0;
  // Seconds spent inside the operations so far, waiting for slower ranks included (0 for one
  // process): the run's communication share.
  virtual double seconds_exchanging() const = 0;
  // Ends every rank with `exit_code` (a rank that failed: the others would wait in their next
  // operation for ever). One process: std::exit.
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// One process: rank 0 of 1; the operations leave their buffers as they are.
std::shared_ptr<Collective> single_process();

// Whether this build has the MPI collective (the CMake component STOKER_DISTRIBUTED).
bool mpi_available();

// Whether an MPI launcher started this process (Open MPI's mpirun, or a PMI/PMIx launcher such as
// Slurm's srun): the variables it sets.
bool launched_by_mpi();

// The MPI collective over MPI_COMM_WORLD, initialised on the first call and finalised at exit.
// Error (saying how to build it) when this build has no MPI.
std::shared_ptr<Collective> mpi_collective();

// The MPI launcher (Open MPI's mpirun) of the MPI this build has, for starting ranks on this
// machine; empty when this build has no MPI or the launcher is not installed.
std::string mpi_launcher();

// The collective of the launcher that started this process: MPI's when launched_by_mpi() and
// this build has it, else single_process(). Error when an MPI launcher started a build without MPI
// with more than one process (each would train alone on its share).
std::shared_ptr<Collective> launcher_collective();

}  // namespace stoker::training
