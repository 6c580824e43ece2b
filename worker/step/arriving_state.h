// State still on its way to this rank when it trains again after a resume: the runtime
// (mitra/worker/runtime.h) waits for it before the first step's update. How the state moves is
// the state room's (worker/state/state_exchange.h, StateInFlight); the step needs only this.
#pragma once

#include "mitra/common/status.h"

namespace mitra::worker {

class Runtime;

class ArrivingState {
 public:
  virtual ~ArrivingState() = default;
  // Blocks until everything this rank receives is in place, gives `runtime`'s optimizer its
  // state and waits for what this rank sends. Throws PeerError; a Status for state the optimizer
  // refuses. Once, on the training thread.
  virtual Status Finish(Runtime& runtime) = 0;
  // After Finish: from the transfers' start until the last byte arrived (0: none), and how
  // long Finish waited.
  virtual double arrival_s() const = 0;
  virtual double wait_s() const = 0;
  // Gives up on what has not arrived; returns once nothing more is written. No-op after Finish.
  virtual void Abort() = 0;
};

}  // namespace mitra::worker
