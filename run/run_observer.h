// RunObserver: what watches a run as the manager records it, besides the run directory's
// files. The Prometheus metrics (metrics.h) are one.
//
// The journal (run_journal.h) tells it every record it writes, as written; the loop
// (run_loop.h) tells it the machines' states whenever it lists them again for `mitra status`.
#pragma once

#include <vector>

#include "common/json.h"
#include "manager/status_report.h"

namespace mitra::run {

// Called on the manager's loop thread only, so an implementation needs no lock for its own
// state; it must return at once (no I/O, no waiting): the loop waits for it.
class RunObserver {
 public:
  virtual ~RunObserver() = default;

  // An events.jsonl record: {"time":T,"event":NAME,...} (docs/mitra-run.md#eventsjsonl).
  virtual void OnEvent(const JsonObject& record) = 0;
  // A metrics.jsonl record: a step's, or an evaluation's (eval_ fields, no "loss").
  virtual void OnStep(const JsonObject& record) = 0;
  // state.json's new contents (docs/mitra-run.md#statejson).
  virtual void OnState(const JsonObject& state) = 0;
  // Every machine of the list and its state, as `mitra status` shows them.
  virtual void OnMachines(const std::vector<manager::MachineStatus>& machines) = 0;
};

}  // namespace mitra::run
