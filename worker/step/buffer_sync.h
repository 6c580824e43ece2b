// BufferSync: the replicas of a stage hold identical buffers after every step.
//
// Replicas run different micro-batches, so buffers that a forward updates (BatchNorm's running
// statistics) drift apart. After each step the replicas exchange their buffers (one all-gather
// over the stage's data-parallel group, in float64) and every replica computes the same
// combination from the same inputs, so they end bitwise equal:
//
//  - BatchNorm's running_mean and running_var, with num_batches_tracked (LibTorch's BatchNorm,
//    or a cutpoint::RunningStatistics module such as a Python BatchNorm): as if a single
//    replica had run all of the step's micro-batches in their global order. The update rule is
//    affine in the running value (r <- (1 - m) r + m x, or a cumulative average when momentum
//    is unset), so each replica's change since the start of the step composes exactly with the
//    others'; the count of updates comes from num_batches_tracked. The result equals a one-
//    replica job's running statistics (to float rounding), whatever D, and so do evaluations.
//  - every other buffer: replica 0's value, as DDP's broadcast_buffers does; nothing else is
//    known about how such a buffer changes.
//
// With a partition per pipeline the replicas of a stage hold different segments: a BufferSync per
// reduction group (worker/step/pipeline_partitions.h) then keeps the buffers of its segments
// equal over its ranks, one in each replica, combined in replica order the same way.
//
// Not thread-safe; the training thread calls BeginStep and EndStep around each step.
#pragma once

#include <memory>
#include <vector>

#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"

namespace mitra::worker {

class BufferSync {
 public:
  // Null when there is nothing to keep equal: one replica, or a stage without buffers.
  static std::unique_ptr<BufferSync> Create(const Stage& stage, Comm* comm);
  // The buffers of `segments` (of the stage) over `group`, whose rank d is replica d's holder;
  // null where those segments have no buffers or the group has one rank.
  static std::unique_ptr<BufferSync> Create(const Stage& stage, Comm* comm,
                                            c10d::ProcessGroup* group,
                                            const std::vector<int>& segments);

  // Remembers the buffers' values at the start of a step.
  void BeginStep();
  // Combines the replicas' buffers (a collective: every replica of the stage calls it).
  void EndStep();

 private:
  // A BatchNorm module's running statistics: indices into members_.
  struct RunningStats {
    size_t mean = 0, var = 0, count = 0;
    bool cumulative = false;  // momentum unset: a cumulative average
    double momentum = 0;
  };

  BufferSync(const Stage& stage, Comm* comm, c10d::ProcessGroup* group)
      : stage_(stage), comm_(comm), group_(group) {}
  torch::Tensor Flatten() const;  // every member, float64, concatenated

  const Stage& stage_;
  Comm* comm_;
  c10d::ProcessGroup* group_;
  std::vector<size_t> members_;   // the buffers kept equal: indices into the stage's
  std::vector<int64_t> offsets_;  // of each member in the flat vector, plus the end
  std::vector<RunningStats> stats_;
  torch::Tensor start_;         // Flatten() at BeginStep
};

}  // namespace mitra::worker
