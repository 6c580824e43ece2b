// `--machines slurm`: the machine list of the Slurm allocation the manager runs in (inside an
// `sbatch` script or under `salloc`), read from the variables Slurm sets there:
//
//   SLURM_JOB_NODELIST    the nodes, compressed ("gpu[01-03],cpu7"): expanded by
//                         `scontrol show hostnames`, so every Slurm list form is read as
//                         Slurm reads it
//   SLURM_TASKS_PER_NODE  slots per node, in the same order ("4(x3),2": 4 on each of the first
//                         three nodes, 2 on the fourth): one worker per task, as `sbatch
//                         --ntasks-per-node=G` (one task per GPU) asks
//
// `--gpus-per-node N`, when given, is the slots of every node instead. SLURM_JOB_CPUS_PER_NODE
// is not used: it counts CPUs, and a GPU job's workers are one per GPU, not per CPU.
//
// The list is fixed for the allocation: nothing watches it. A node that fails still ends its
// workers, and the job goes on without it (recovery, docs/manager.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "manager/machine_list.h"
#include "mitra/common/status.h"
#include "run/worker_env.h"

namespace mitra::run {

// The --machines value that asks for the allocation's machines (a file named `slurm` is
// `--machines ./slurm`).
inline constexpr std::string_view kSlurmMachines = "slurm";

// "2(x3),1" -> {2, 2, 2, 1}: Slurm's compressed counts (SLURM_TASKS_PER_NODE,
// SLURM_JOB_CPUS_PER_NODE). InvalidArgument naming `variable` and what is wrong.
Result<std::vector<int>> ParseSlurmCounts(std::string_view text, std::string_view variable);

// Expands a Slurm host list into host names, in order. May block (it runs a command).
using HostListExpander =
    std::function<Result<std::vector<std::string>>(const std::string& host_list)>;

// The real expander: `scontrol show hostnames LIST`, run with `environment` (PATH, SLURM_CONF),
// at most 30 s.
Result<std::vector<std::string>> ExpandWithScontrol(const std::string& host_list,
                                                    const Environment& environment);

// The allocation's machines, from the manager's `environment`: each node once, with
// `slots_per_node` slots when > 0 (--gpus-per-node given), else its SLURM_TASKS_PER_NODE count.
// InvalidArgument outside an allocation (no SLURM_JOB_NODELIST), naming the fix, and when the
// variables disagree or a node name is not a host name.
Result<manager::MachineList> SlurmMachineList(const Environment& environment, int slots_per_node,
                                     const HostListExpander& expand);

}  // namespace mitra::run
