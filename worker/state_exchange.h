// State exchange: how the ranks of a new generation get the state of the step they resume from
// (docs/manager.md, "State from peers").
//
// Each rank may hold, in memory, the state of the segments it trained in the previous
// generation (worker/held_state.h): its own, kept when it parked, or nothing (a new process).
// Right after the groups are formed, every rank says what it holds; each then works out the
// same plan (PlanResume, a pure function): a segment of its new stage that it holds is *kept*
// (nothing moves), one that a peer holds is sent by that peer, point to point, directly into
// the receiver's tensors, and one that nobody holds is read from the checkpoint of the step.
// A transfer's sender is chosen among the holders to spread the sending; all transfers run at
// once. The trainer state (loss scale, generator) comes from the lowest rank that holds any
// state of the step, or from the checkpoint when none does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::worker {

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
  double seconds = 0;                     // the slowest rank's exchange, checkpoint reads included
  double transfer_seconds = 0;            // the slowest rank's sending and receiving
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
// rank of the generation calls it once, before the first step. Throws PeerError when a peer
// fails; a Status for a segment nobody holds and no checkpoint has.
Result<ResumeSummary> ResumeFromPeers(Runtime& runtime, HeldState* held, bool checkpoint_complete,
                                      const CheckpointReader& read_checkpoint);

}  // namespace mitra::worker
