// Checkpointer: saves and restores one rank's share of a checkpoint (docs/checkpoint-format.md).
//
// Files are keyed by segment and parameter name, never by rank, so a checkpoint written in one
// shape loads into any other. Each segment is written once: the segments of a stage are spread
// over its replicas (segment i of the stage goes to replica i mod D). Rank 0 also writes
// trainer.pt and, once every rank has reported its files through the rendezvous store, the
// manifest; then it renames step-N.partial to step-N and prunes old checkpoints.
//
// Save() blocks the training loop only while tensors are copied to memory; a background thread
// serialises, writes, fsyncs and reports. A new Save() first waits for the previous one, so
// the memory copies go into the same staging buffers every time: only the first save pays
// for allocating (and faulting in) that memory.
// Not thread-safe: call from the training thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "checkpoint/tensor_file.h"
#include "common/status.h"
#include "worker/runtime.h"

namespace mitra::worker {

struct CheckpointOptions {
  std::string dir;      // empty: no checkpoints
  int64_t every = 0;    // save every N steps (0: only at the end and on stop)
  int keep = 3;         // complete checkpoints kept; < 1 keeps all
  bool async = true;    // write in the background
};

// Every parameter of the model as "<segment>.<name>[d0,d1,...]", space-separated, in segment
// order: what the describe record reports so that `mitra run` can refuse another model's
// checkpoint before it starts anything (docs/worker-contract.md). Builds each segment once, one
// at a time, and frees it.
std::string DescribeParameters(const cutpoint::ModelSpec& spec);

class Checkpointer {
 public:
  Checkpointer(Runtime& runtime, const cutpoint::ModelSpec& spec, CheckpointOptions options);
  ~Checkpointer();  // waits for a save in flight

  // Snapshots the state after `steps_done` steps and writes it (in the background if async).
  void Save(int64_t steps_done);
  // Waits for the save in flight; its status (OK when there is none).
  Status Wait();

  // Restores parameters, optimizer state and RNG from the checkpoint of step `step`: checks
  // the checksums of the files this rank reads, and that the names and shapes match the model.
  Status Restore(int64_t step);

  const CheckpointOptions& options() const { return options_; }

 private:
  struct Snapshot;
  std::unique_ptr<Snapshot> TakeSnapshot(int64_t steps_done);
  Status Write(const Snapshot& snapshot);
  Status CommitAsRankZero(int64_t step, double started);
  std::vector<int> SegmentsThisRankWrites() const;
  // `source` copied into the staging buffer kept under `key` (allocated on first use).
  torch::Tensor Staged(const std::string& key, const torch::Tensor& source);
  std::string Key(int64_t step, const std::string& what) const;

  Runtime& runtime_;
  const cutpoint::ModelSpec& spec_;
  CheckpointOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;  // its own connection: used by the writer thread
  std::map<std::string, torch::Tensor> staging_;  // reused by every snapshot
  std::thread writer_;
  Status last_status_;
};

}  // namespace mitra::worker
