// GenerationEnding: how the running generation ends, and the change that ends it (docs/manager.md,
// "Morphs", "Recovery", "Stopping"). One of:
//
//   a morph     the machines changed: the ranks stop or park, and the next generation launches
//   a recovery  a rank failed and the restart budget allows another launch
//   a stop      asked for (Ctrl-C, mitra stop): once every rank is down the job ends stopped
//   the job's end  a failure the budget does not allow, or a deadline: it ends failed
//
// A failure on the way to an end (a stop that times out, a second Ctrl-C, a rank that fails
// after the last step) makes the job's outcome a failure without changing how the ranks are
// brought down; the first such reason is the job's. A morph or a recovery is a change: the next
// generation's first step reports how long it took, from when it was detected.
//
// A value the controller keeps beside MachinePool and RestartBudget: told each turn with the
// time, asked what it means; no clock, no I/O. Not thread-safe: the controller owns it.
#pragma once

#include <optional>
#include <string>

#include "manager/finish_action.h"

namespace mitra::manager {

class GenerationEnding {
 public:
  enum class Kind { kNone, kMorph, kRecovery, kStop, kJobEnd };

  Kind kind() const { return kind_; }
  bool Is(Kind kind) const { return kind_ == kind; }

  // A morph or a recovery detected at `now`: the change whose downtime counts from now.
  void BeginMorph(double now) { Begin(Kind::kMorph, "morph", now); }
  void BeginRecovery(double now) { Begin(Kind::kRecovery, "recovery", now); }
  void BeginStop() { kind_ = Kind::kStop; }
  // The job ends as `end` once the ranks are down, whatever they do now; it replaces a failure
  // said before.
  void EndJob(FinishAction end);
  // The job ends failed with `reason` once the ranks are down, unless a failure was said
  // first; the generation ends as it was going to.
  void FailJob(const std::string& reason);
  // The next generation launched: nothing ends it yet. A change stays until its first step.
  void Launched() { kind_ = Kind::kNone; }
  // The ending generation's last rank exited at `now` (once per generation).
  void RanksExited(double now);

  // Once every rank is down: how the job finishes, or nullopt when a generation launches next
  // (a morph or a recovery with no failure said).
  std::optional<FinishAction> Outcome() const;

  // A morph or a recovery whose next generation has not trained yet.
  struct Change {
    std::string kind;          // "morph" or "recovery"
    double detected = 0;       // the edit, request or failure that began it
    double ranks_exited = 0;   // the last rank of the ending generation exited
  };
  bool ChangePending() const { return change_.has_value(); }
  // The change, once its next generation trained a step: told once, then forgotten.
  std::optional<Change> TakeChange();

 private:
  void Begin(Kind kind, const char* name, double now);

  Kind kind_ = Kind::kNone;
  std::optional<FinishAction> end_;  // the job's end, decided before the ranks are down
  std::optional<Change> change_;
};

}  // namespace mitra::manager
