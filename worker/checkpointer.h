// Checkpointer: saves and restores one rank's share of a checkpoint (docs/checkpoint-format.md).
//
// Files are keyed by segment and parameter name, never by rank, so a checkpoint written in one
// shape loads into any other. Each segment is written once: the segments of a stage are spread
// over its replicas (segment i of the stage goes to replica i mod D). Rank 0 also writes
// trainer.pt and, once every rank has reported its files through the rendezvous store, the
// manifest; then it renames step-N.partial to step-N and prunes old checkpoints.
//
// Save() hardly blocks the training loop: it notes which tensors to save and returns; a
// background thread copies them into staging buffers while the next step's forward and backward
// run (they change neither the parameters nor the optimizer state), then writes, fsyncs and
// reports. The next optimizer step waits for the copy if it is not done yet
// (Runtime::BeforeNextUpdate); the checkpoint record's blocked_s counts that wait and the time
// in Save(). A new Save() first waits for the previous one, so the copies go into the same
// staging buffers every time: only the first save pays for allocating that memory.
// Not thread-safe: call from the training thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <condition_variable>
#include <mutex>
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
  // Copies the snapshot's tensors into their staging buffers and says so (and, with `release`,
  // lets the writer report at once: a synchronous save).
  void CopyAndRelease(Snapshot& snapshot, bool release = true);
  // The training thread, before an optimizer step or a new save: waits for the copy.
  void Release();
  // The writer thread: waits until the training thread has passed Release(); returns how long
  // the training thread waited there.
  double AwaitRelease();
  Status Write(const Snapshot& snapshot);
  Status CommitAsRankZero(int64_t step, double started);
  std::vector<int> SegmentsThisRankWrites() const;
  // Rank 0, after a restore: says which of trainer.pt's settings (seed, batch, learning-rate
  // schedule) differ from this run's, in its log and as a `warning` record for the manager.
  void WarnAboutChangedSettings(const std::string& path,
                                const std::map<std::string, torch::Tensor>& written) const;
  // The staging buffer kept under `key` for `source` (allocated on first use). Used by one
  // thread at a time: the writer while a save is in flight, else the training thread.
  torch::Tensor Staging(const std::string& key, const torch::Tensor& source);
  std::string Key(int64_t step, const std::string& what) const;

  Runtime& runtime_;
  const cutpoint::ModelSpec& spec_;
  CheckpointOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;  // its own connection: used by the writer thread
  std::map<std::string, torch::Tensor> staging_;  // reused by every snapshot (see Staging)
  std::thread writer_;
  Status last_status_;
  std::mutex mu_;  // guards the three below, shared by the training and writer threads
  std::condition_variable cv_;
  bool copied_ = true;
  bool released_ = true;
  double waited_s_ = 0;
};

}  // namespace mitra::worker
