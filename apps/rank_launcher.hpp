// One machine, several GPUs, no launcher: `stoker train --device cuda:0,1` starts itself again
// under MPI's launcher, one rank per listed GPU; each rank then takes its GPU by its place on the
// machine (training::choose_device with the rank's local_rank).
#pragma once

#include <string>
#include <vector>

namespace stoker::app {

// The launcher's command line that runs `command` (this process's own, argv[0] first) as `ranks`
// ranks on this machine: `launcher` -np N, shared memory between them, not bound to cores.
std::vector<std::string> one_rank_per_gpu_command(const std::string& launcher, int ranks,
                                                  const std::vector<std::string>& command);

// Replaces this process with one_rank_per_gpu_command() of its own command line (/proc/self);
// Error when this build has no MPI or its mpirun is not installed, or the exec fails.
[[noreturn]] void restart_as_one_rank_per_gpu(int ranks);

}  // namespace stoker::app
