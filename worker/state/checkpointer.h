// Checkpointer: saves and restores one rank's share of a checkpoint (docs/checkpoint-format.md).
//
// Files are keyed by segment and parameter or buffer name, never by rank, so a checkpoint written in one
// shape loads into any other. Each segment is written once: the segments of a stage are spread
// over its replicas (segment i of the stage goes to replica i mod D). Rank 0 also writes
// trainer.pt and, once every rank has reported its files through the rendezvous store, the
// manifest; then it renames step-N.partial to step-N and prunes old checkpoints.
//
// Save() hardly blocks the training loop: it copies the buffers (small, and changed by the next
// forward), notes which other tensors to save and returns; a background thread copies those
// into staging buffers while the next step's forward and backward run (they change neither the
// parameters nor the optimizer state), then writes, fsyncs and
// reports. The next optimizer step waits for the copy if it is not done yet
// (Runtime::BeforeNextUpdate); the checkpoint record's blocked_s counts that wait and the time
// in Save(). A new Save() first waits for the previous one, so the copies go into the same
// staging buffers every time. The buffers come from the process's StagingPool
// (worker/state/staging_pool.h) and go back to it when the checkpointer ends, so that the next
// generation's first save (the one right after a morph) copies into memory already paged in.
// With periodic saves PrepareStaging() fills the pool in the background before the first save
// (for each parameter this rank writes, 1 + Optimizer::StateTensorsPerParameter() buffers of
// its shape), so that the first save costs what the others do; a save that comes before that
// is done waits for it, and counts the wait as blocked. Once a save has copied, the buffers it
// did not take leave the pool.
//
// Every change to the checkpoint directory (the partial directory, the tensor files, the
// manifest, the rename, the pruning) goes through a FileSystem (common/file_system.h): the
// machine's unless a test passes its own. Reads of tensor files go to the disk directly.
// Not thread-safe: call from the training thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "checkpoint/manifest.h"
#include "checkpoint/tensor_file.h"
#include "common/file_system.h"
#include "mitra/common/status.h"
#include "mitra/worker/checkpoint_options.h"
#include "mitra/worker/runtime.h"
#include "mitra/worker/stage.h"

namespace mitra::worker {

// The model's parameters and buffers, as the describe record reports them so that `mitra run`
// can refuse another model's checkpoint before it starts anything (docs/worker-contract.md):
// each "<segment>.<name>[d0,d1,...]", space-separated, in segment order. `independence` says
// whether a declared micro_batch_independent holds (mitra/cutpoint/model.h). Builds each segment
// once, one at a time, and frees it.
struct ModelDescription {
  std::string parameters;
  std::string buffers;
  Status independence;
};
ModelDescription DescribeModel(const cutpoint::ModelSpec& spec);

// Optimizer state read from a checkpoint: parameter (its name inside the segment) -> state
// name -> tensor.
using OptimizerStates = std::map<std::string, std::map<std::string, torch::Tensor>>;

// Reads the segment file `entry` of the checkpoint directory `dir`: each tensor named in `live`
// ("param/<name>", "buffer/<name>") into that tensor, after checking that the file holds it with
// the same shape and type; the optimizer state ("<state>/<parameter>") into `state`, unless
// null. The file's checksum is checked as it is read. InvalidArgument, naming the difference,
// for another model's file.
Status ReadSegmentFile(const std::string& dir, const checkpoint::FileEntry& entry,
                       const std::map<std::string, torch::Tensor>& live, OptimizerStates* state);

// The parameters and buffers of `segment` held by `stage`, under their names in a segment file.
std::map<std::string, torch::Tensor> SegmentTensors(const Stage& stage, const std::string& segment);

class Checkpointer {
 public:
  // Connects to the rendezvous store of `runtime`'s placement (its own connection).
  Checkpointer(Runtime& runtime, const cutpoint::ModelSpec& spec, CheckpointOptions options);
  // The same, writing through `fs`, which must outlive the checkpointer and be thread-safe (the
  // writer thread and the training thread both use it).
  Checkpointer(Runtime& runtime, const cutpoint::ModelSpec& spec, CheckpointOptions options,
               FileSystem& fs);
  ~Checkpointer();  // waits for a save in flight

  // Snapshots the state after `steps_done` steps and writes it (in the background if async).
  void Save(int64_t steps_done);
  // Waits for the save in flight; its status (OK when there is none).
  Status Wait();
  // A peer failed: a save in flight will never be complete, so rank 0 stops waiting for the
  // other ranks' parts of it (its commit fails, the directory stays partial). Thread-safe.
  void Abandon() { abandoned_ = true; }
  // With periodic asynchronous saves, starts allocating and touching the staging memory of
  // the saves to come on the writer thread (see above); call it once the state is restored
  // (a restore reading the checkpoint at the same time would go slower). Otherwise nothing.
  void PrepareStaging();

  // Restores parameters, buffers, optimizer state and RNG from the checkpoint of step `step`:
  // checks the checksums of the files this rank reads, and that the names and shapes match the
  // model. Optimizer state written by another optimizer is left out (rank 0 warns): the
  // optimizer starts afresh.
  Status Restore(int64_t step);
  // The same for some segments of this rank's stage only, and the trainer state (the loss
  // scale, the generator) when `trainer_state`: a resume that takes the rest from memory
  // (worker/state/state_exchange.h).
  Status RestoreSegments(int64_t step, const std::vector<int>& segments, bool trainer_state);
  // Whether the checkpoint of step `step` is complete (its manifest is there and whole).
  bool Complete(int64_t step);

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
  Status RestoreSegment(const std::string& path, const checkpoint::FileEntry& entry, int segment,
                        bool with_optimizer_state);
  Status RestoreTrainerState(const std::string& path, const checkpoint::Manifest& manifest);
  // Rank 0, after a restore: says which of trainer.pt's settings (seed, batch, micro-batch,
  // learning-rate schedule) differ from this run's, in its log and as a `warning` record.
  void WarnAboutChangedSettings(const std::string& path,
                                const std::map<std::string, torch::Tensor>& written) const;
  void Warn(const std::string& message) const;  // rank 0's log and a `warning` record
  // The staging buffer kept under `key` for `source` (taken from the process's StagingPool on
  // first use). Used by one thread at a time: the writer while a save is in flight, else the
  // training thread.
  torch::Tensor Staging(const std::string& key, const torch::Tensor& source);
  std::string Key(int64_t step, const std::string& what) const;

  Runtime& runtime_;
  const cutpoint::ModelSpec& spec_;
  CheckpointOptions options_;
  PosixFileSystem machine_fs_;  // fs_ unless the constructor was given a FileSystem
  FileSystem* fs_;
  c10::intrusive_ptr<c10d::Store> store_;  // its own connection: used by the writer thread
  std::map<std::string, torch::Tensor> staging_;  // reused by every snapshot (see Staging)
  bool preparing_ = false;  // the writer thread fills the pool (PrepareStaging)
  std::atomic<bool> abandoned_{false};  // Abandon()
  std::thread writer_;
  Status last_status_;
  std::mutex mu_;  // guards the three below, shared by the training and writer threads
  std::condition_variable cv_;
  bool copied_ = true;
  bool released_ = true;
  double waited_s_ = 0;
};

}  // namespace mitra::worker
