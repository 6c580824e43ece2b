// State exchange: how the ranks of a new generation get the state of the step they resume from
// (docs/manager.md, "State from peers").
//
// Each rank may hold, in memory, the state of the segments it trained in the previous
// generation (worker/step/held_state.h): its own, kept when it parked, or nothing (a new process).
// Right after the groups are formed, every rank says what it holds; each then works out the
// same plan (PlanResume, a pure function): a segment of its new stage that it holds is *kept*
// (nothing moves), one that a peer holds is sent by that peer, point to point, directly into
// the receiver's tensors, and one that nobody holds is read from the checkpoint of the step.
// A transfer's sender is chosen among the holders to spread the sending; all transfers run at
// once; between two processes of one machine the receiver copies straight from the sender's
// memory (worker/state/peer_memory.h) when every rank can, and tells the sender when it is done.
// The exchange waits for the parameters and buffers; the optimizer state, two thirds of
// AdamW's bytes, goes on arriving while the first step computes, and its update waits for it
// (StateInFlight). The trainer state (loss scale, generator) comes from the lowest rank that
// holds any state of the step, or from the checkpoint when none does.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mitra/common/status.h"
#include "worker/step/arriving_state.h"

namespace mitra::worker {

class Comm;
class Runtime;
struct HeldState;

// What one rank holds: the state of segments [first, end) after `step` steps (step -1: none).
struct Holding {
  int64_t step = -1;
  int first = 0, end = 0;
  bool Holds(int segment, int64_t at_step) const {
    return step >= 0 && step == at_step && segment >= first && segment < end;
  }
};

enum class StateSource { kKept, kPeer, kCheckpoint };
// "kept", "peer", "checkpoint"
const char* StateSourceName(StateSource source);

struct SegmentTransfer {
  int segment = 0;
  int from = 0, to = 0;  // ranks
};

struct ResumePlan {
  // Where each rank's state comes from, the costliest of its segments' sources (checkpoint >
  // peer > kept).
  std::vector<StateSource> rank_sources;
  std::vector<SegmentTransfer> transfers;  // in (to, segment) order
  // (rank, segment) read from the checkpoint.
  std::vector<std::pair<int, int>> from_checkpoint;
  int trainer_donor = -1;  // the rank whose trainer state every rank takes; -1: the checkpoint
};

// The plan for resuming at step `step` when rank r holds `held[r]` and needs the segments
// needs[r] (one range, or one per chunk). Every rank computes the same plan from the same inputs.
ResumePlan PlanResume(const std::vector<Holding>& held, const std::vector<std::vector<int>>& needs,
                      int64_t step);

// What the exchange did, summed over the ranks (the same on every rank).
struct ResumeSummary {
  std::vector<StateSource> rank_sources;  // by rank
  int64_t peer_bytes = 0;                 // sent point to point, all ranks together
  // Of those, the bytes a rank copied straight from a peer process of its machine
  // (worker/state/peer_memory.h) rather than through the job's backend.
  int64_t copied_bytes = 0;
  // The slowest rank's exchange until it could train, checkpoint reads included; its transfers
  // from their start to the last byte received (the optimizer state arrives while the first
  // step trains); and how long its first step waited for that state. All this rank's own until
  // CompleteResumeSummary.
  double seconds = 0;
  double transfer_seconds = 0;
  double first_step_wait_s = 0;
  // Rank 0 found a complete checkpoint of the step: none needs to be written after the resume.
  bool checkpoint_complete = false;
  int kept = 0, peer = 0, checkpoint = 0;  // ranks by source
};

// Reads segments of this rank's stage from the checkpoint of the resume step, and the trainer
// state with them when `trainer_state` (Checkpointer::RestoreSegments).
using CheckpointReader =
    std::function<Status(const std::vector<int>& segments, bool trainer_state)>;

// Runs the exchange on `runtime` (created with `held`, whose left-over segments it serves to
// peers; may be null) for the placement's resume step. `checkpoint_complete`: whether this rank
// sees a complete checkpoint of that step (rank 0's view is the one used). A collective: every
// rank of the generation calls it once, before the first step. It returns once the parameters
// and buffers have arrived; the optimizer state goes on arriving while the first step trains
// (Runtime::ExpectStateFromPeers), unless it is a small copy from this machine's peers, which
// is done before it returns (StateInFlight). Throws PeerError when a peer fails; a Status for
// a segment nobody holds and no checkpoint has.
Result<ResumeSummary> ResumeFromPeers(Runtime& runtime, HeldState* held, bool checkpoint_complete,
                                      const CheckpointReader& read_checkpoint);

// The summary's times, the slowest rank's, once the first step after the exchange is done (its
// all-reduce gathered them: Runtime::resume_times).
void CompleteResumeSummary(const Runtime& runtime, ResumeSummary* summary);

// Tests: the most optimizer-state bytes a rank copies before training rather than on a thread
// (-1: the default, 16 MiB), so that a small model can take either way.
void SetInlineCopyBytesForTesting(int64_t bytes);

// The transfers of a resume still on their way when training starts: the optimizer state this
// rank receives, which a thread of its own waits for (and times) while the first step computes,
// and the messages this rank sends. A rank that copies all of it from peers of its machine,
// 16 MiB at most, copies it before training instead: a thread would wait longer for a core.
// The first update waits for both (Finish): the optimizer needs its state, and until a message
// is sent the tensor it is sent from must not change.
class StateInFlight : public ArrivingState {
 public:
  struct Transfers;  // the messages, posted (state_exchange.cc)
  // Starts waiting for `transfers`' incoming messages (or copies them, when few, before it
  // returns); `start`: when the transfers began.
  StateInFlight(Comm& comm, std::unique_ptr<Transfers> transfers,
                std::chrono::steady_clock::time_point start);
  // Aborts the receives still pending and waits for the thread. The tensors of the messages are
  // freed with it: destroy it after the process groups (a send may still be reading them).
  ~StateInFlight() override;
  StateInFlight(const StateInFlight&) = delete;
  StateInFlight& operator=(const StateInFlight&) = delete;

  // When the optimizer state has arrived already (copied by the constructor), gives it to the
  // optimizer now; otherwise does nothing (Finish will). Does not block; a Status for state
  // the optimizer refuses. On the training thread, before the first step.
  Status GiveStateIfArrived(Runtime& runtime);
  // Blocks until everything this rank receives is in place, gives the optimizer its state
  // (unless it has it already) and waits for what this rank sends. Throws PeerError; a Status
  // for state the optimizer refuses. Once, on the training thread.
  Status Finish(Runtime& runtime) override;
  // After Finish: from the transfers' start until the last byte this rank received (0: none),
  // and how long Finish waited for that and for this rank's sends.
  double arrival_s() const override { return arrival_s_; }
  double wait_s() const override { return wait_s_; }
  // Aborts the receives still pending and waits for the thread (no-op once it has ended).
  void Abort() override;

 private:
  void Receive();  // the thread's, or the constructor's for a small copy
  Status GiveState(Runtime& runtime);  // the optimizer's state received, to it

  Comm& comm_;
  std::unique_ptr<Transfers> transfers_;
  std::chrono::steady_clock::time_point start_;
  double wait_s_ = 0;
  bool given_ = false;  // the optimizer has the state received
  // Written by the thread, read once it has been joined.
  double arrival_s_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace mitra::worker
