// What the controller tells: typed facts about the job, and their narration as events.jsonl
// records and terminal lines.
//
// The controller (controller.h) decides and states facts ("rank 2 failed", "the morph is done
// after 3.1 s"); Narrate() alone knows how each is worded: the event's name and fields
// (docs/mitra-run.md lists them) and the "mitra: ..." line, if any, that the terminal shows.
// Changing a message never touches a decision, and a decision's test never parses text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/json.h"
#include "manager/parked_workers.h"
#include "planner/grid.h"
#include "planner/shape_policy.h"

namespace mitra::manager {

// The machine list changed; what the controller does about it.
struct ListChangedFact {
  enum class Action {
    kPlan,     // waiting: plan a generation
    kKeep,     // running: the shape stays (machines joining are checked first)
    kMorph,    // running: morph into the new shape
    kFolded,   // morphing or recovering: the next generation uses it
    kAfterReady,  // running, some workers still starting: the morph waits until they are ready
    kIgnored,  // nothing to do (why says so when there is a reason)
  };
  Action action = Action::kIgnored;
  std::string change;  // MachinePool::Change::Describe()
  std::vector<std::string> added, removed, checking;
  int slots = 0;
  std::string phase;
  std::string shape;  // kKeep: the shape that stays
  std::string why;    // kIgnored
  int starting = 0;   // kAfterReady: the workers not ready yet
};

// A machine is drained (controller.h's DrainMachine); what the controller does about it.
struct DrainFact {
  enum class Action {
    kKeepOff,  // no rank runs there: it stays out of every later generation
    kMorph,    // ranks run there: a planned morph moves them off
    kFolded,   // a morph or recovery is under way: the next generation leaves it out
    kUnknown,  // no listed machine has that address
  };
  std::string machine;
  std::string by;
  Action action = Action::kKeepOff;
};

struct AllReadyFact {
  int ranks = 0;
  double after_s = 0;
};

// The first step after a morph or recovery, and the downtime it ended, split: stop (the change
// seen -> every rank exited or parked), relaunch (-> launched), ready (-> every rank ready: a
// process start, or a regroup when parked workers were kept), load (rank 0's restore) and first
// step (the rest).
struct TrainingAgainFact {
  std::string kind;  // "morph" or "recovery"
  int64_t step = 0;
  std::string shape;
  int kept = 0;     // ranks taken by parked workers
  int started = 0;  // ranks that started a process
  double downtime_s = 0, stop_s = 0, relaunch_s = 0, ready_s = 0, load_s = 0, first_step_s = 0;
  std::optional<StateSources> sources = {};  // where the state came from; absent: the checkpoint
  // No generation of this manager had trained before: a start that failed, then one that
  // worked, not a recovery of training.
  bool first_training = false;
};

struct TrainingDoneFact {
  int64_t step = 0;
};

struct RankStoppedFact {
  int rank = 0;
  int64_t step = 0;
  double after_s = 0;  // since SIGUSR1 (or the launch)
};

// A rank could not be started while the generation was being torn down anyway.
struct StartFailedFact {
  int rank = 0;
  std::string reason;
};

struct HostHealthyFact {
  std::string machine;
  bool local = false;  // nothing to tell the terminal
};

// A health check failed (`failed_checks`), or a machine failed too often in a row and is
// kept out (`failures`).
struct HostKeptOutFact {
  std::string machine;
  std::string reason;
  std::optional<int> failed_checks;
  std::optional<int> failures;
  double retry_in_s = 0;
};

// SIGINT/SIGTERM or `mitra stop`, and the phase it found ("already stopping" when repeated).
struct StopRequestedFact {
  std::string source;
  std::string state;
};

struct StoppingFact {
  enum class How {
    kAskRanks,          // SIGUSR1 to every rank (timeout_s)
    kBeforeReady,       // not all ranks were ready: they are terminated
    kAfterTheChange,    // during a morph or recovery: once the ranks have exited
    kSecondRequest,     // a second request: the ranks are terminated
  };
  How how = How::kAskRanks;
  std::string source;
  std::string kill_hint;  // " (SIGINT again kills them)" or ""
  int64_t step = 0;
  int ranks = 0;
  double timeout_s = 0;
};

// The workers did not stop (stop timeout) or did not follow a finished rank (finish timeout).
struct TimeoutFact {
  enum class Kind { kStop, kFinish };
  Kind kind = Kind::kStop;
  std::string reason;
};

struct KillFact {
  std::vector<int64_t> pids;
  std::string reason;  // "" when the grace after SIGTERM ran out
};

struct TerminateFact {
  std::string reason;
  std::vector<int64_t> pids;
  double grace_s = 0;
};

struct AbandonFact {
  std::vector<std::string> ranks;
  double after_s = 0;
};

struct WaitingFact {
  std::string reason;
};

// A generation's ranks are not all ready yet: `starting` of `total` are still starting, for
// `for_s` since the launch (`silent` of them have not said a word: their program has not
// reached mitra); they are waited for up to `timeout_s` after the launch.
struct StartingFact {
  int starting = 0;
  int total = 0;
  int silent = 0;
  double for_s = 0;
  double timeout_s = 0;
};
// "2 of 4 workers starting for 18 s (1 still loading its program); waiting up to 300 s
// (--start-timeout)": the fact's words, also the controller's reason while it lasts.
std::string StartingText(const StartingFact& f);

// A grow starts its new workers first (standby: they load and park while the job trains); the
// morph follows when they are ready.
struct WarmUpFact {
  std::string reason;
  std::vector<std::string> machines;  // one entry per new worker
};

// A standby worker could not be started, or exited before it parked: the running generation is
// untouched; the morph goes on without it (`morph`), or, when nothing is left to change, not.
struct StandbyFailedFact {
  std::string machine;
  std::string reason;
  bool morph = false;
};

struct MorphFact {
  std::string reason;
  std::string from;  // the shape
  int64_t step = 0;
  int ranks = 0;
  bool skipped = false;  // training was done: the ranks only finish their own work
  // The ranks keep their state in memory for the next generation instead of checkpointing.
  bool in_memory = false;
};

// A rank (or the job, without `rank`) failed.
struct FailureFact {
  std::string reason;
  int64_t step = 0;
  struct Where {
    int rank = 0;
    int64_t pid = 0;
    std::string machine;
  };
  std::optional<Where> where;
  bool after_training = false;  // nothing is relaunched
  bool during_regroup = false;  // kept workers had not trained yet: the next start is afresh
};

// A generation was launched (GenerationLaunched): its shape, where each rank runs, what was
// started and kept, the checkpoint it resumes from.
struct LaunchedFact {
  int64_t generation = 0;
  planner::GridPlan plan;
  std::string program;
  std::vector<std::string> machines;  // by rank
  std::vector<int64_t> pids;          // by rank; 0: not started
  std::vector<int> kept;              // ranks given to parked workers
  int64_t resume_step = 0;
  std::string rendezvous;
  double launch_s = 0;
  // The step the kept workers hold whole; `held_partial`: some of them hold state, but no step
  // of every segment (a stage lost every replica), so the state comes from the checkpoint.
  std::optional<int64_t> held_step = {};
  bool held_partial = false;
};

// A machine found slower than its plan expected (controller.h's SlowMachine); what follows.
struct SlowMachineFact {
  enum class Action {
    kReplan,     // the plan with it that much slower differs: a planned morph into it
    kKeep,       // the plan with it that much slower is the one running
    kFolded,     // a morph or recovery is under way: the next generation plans with it
    kUnweighed,  // plans do not weigh the machines' speeds (no profile): nothing changes
    kAlone,      // the job runs on no other machine: a rank slower than its peers there is no
                 // slower machine, and nothing changes
  };
  std::string machine;
  double ratio = 1;
  Action action = Action::kUnweighed;
  std::optional<planner::SpeedCorrection> correction;  // what the next plans divide its speed by
  std::string plan;  // kReplan: the plan taken; kKeep: the one running ("1 x 2, shares 5,3")
};

// A planned generation's steps measured against the planner's prediction (ProfileCheck);
// `corrections` (when they disagree): the profile's speeds the next plans divide.
struct ProfileCheckFact {
  int64_t generation = 0;
  std::string shape;  // "1 x 2"
  double predicted_s = 0;
  double measured_s = 0;
  double ratio = 1;
  std::vector<planner::SpeedCorrection> corrections;
};

// A machine the plan runs ranks on that the profile has no figures of: planned like the
// profile's first until its steps measure it (told once per machine).
struct UnmeasuredMachineFact {
  std::string machine;
};

// A planned morph resumes from an older checkpoint than the step every rank stopped after.
struct StepLostFact {
  int64_t expected_step = 0;
  int64_t resume_step = 0;
};

using Fact = std::variant<LaunchedFact, StepLostFact, ListChangedFact, DrainFact, AllReadyFact, TrainingAgainFact, TrainingDoneFact,
                          RankStoppedFact, StartFailedFact, HostHealthyFact, HostKeptOutFact,
                          StopRequestedFact, StoppingFact, TimeoutFact, KillFact, TerminateFact,
                          AbandonFact, WaitingFact, StartingFact, WarmUpFact, StandbyFailedFact,
                          MorphFact,
                          FailureFact, ProfileCheckFact, SlowMachineFact, UnmeasuredMachineFact>;

// A fact as told: the event and its fields for events.jsonl, and the terminal's line ("": none;
// on stderr when `error`).
struct Narration {
  std::string event;
  JsonObject fields;
  std::string line;
  bool error = false;
};

Narration Narrate(const Fact& fact);

}  // namespace mitra::manager
