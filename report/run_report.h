// RunReport: what a run directory says about a job, as typed values, for `mitra report`
// (report_page.h renders it). Read from the files docs/mitra-run.md describes: metrics.jsonl
// (steps, evaluations), events.jsonl (generations, morphs, failures, recoveries and their
// downtime, checkpoints, stragglers), state.json (where a running job is), rank_steps.jsonl
// (per-rank compute and wait times) and, when that is absent, the step traces in
// logs/gen-G/rank-R.trace.json.
//
// A job may still be running: its files grow while they are read. A line without its newline
// is one being written and is left out; a line that does not parse is counted and skipped, so a
// damaged record costs that record only. Reading never writes anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "mitra/common/status.h"

namespace mitra::report {

// One training step as rank 0 reported it (metrics.jsonl). A step trained again after a
// recovery appears once per time it was trained.
struct StepPoint {
  int64_t step = 0;
  int64_t generation = 0;
  double time = 0;  // Unix seconds
  double loss = 0;
  int64_t samples = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;  // 0 for programs without tokens
  double step_time_s = 0;
};

struct EvalPoint {
  int64_t step = 0;
  double time = 0;
  double loss = 0;
  std::optional<double> accuracy;
};

// One launch: its shape and when it trained.
struct GenerationSpan {
  int64_t generation = 0;
  int stages = 0, replicas = 0, world_size = 0;
  int64_t resume_step = 0;
  double launched = 0;           // the `launch` record
  double ended = 0;              // its last record (a worker's exit, a step): the span's end
  std::optional<double> ready;   // every rank ready
  int64_t first_step = 0, last_step = 0;  // steps it trained (0, 0: none)
  // Where the replicas' shares were uneven (machines that differ): each replica's micro-batches
  // a step; empty when even.
  std::vector<int64_t> shares;
  // The machine of each replica's first stage ("?" where the launch record does not say).
  std::vector<std::string> share_machines;
  // Each replica's fraction of the step's micro-batches: its share over all, 1 / D when even.
  std::vector<double> ShareFractions() const;
  std::string Shape() const;     // "2 x 2"
};

// A morph or a recovery: what caused it and what it cost (the `first_step` record).
struct Change {
  std::string kind;   // "morph" or "recovery"
  std::string cause;  // the `morph` reason, or the `failure` reason before it
  int64_t generation = 0;  // the generation that trained again
  int64_t step = 0;        // the first step it trained
  std::string shape;       // the new shape
  double detected = 0;     // when the change was seen (first_step time - downtime)
  double time = 0;         // when training went on
  // The first_step record's split; ready_s and load_s are 0 in records older than them, whose
  // first_step_s covers the start-up and load too.
  double downtime_s = 0, stop_s = 0, relaunch_s = 0, ready_s = 0, load_s = 0, first_step_s = 0;
  int kept = 0;  // ranks given to parked workers
  // Where the ranks' state came from: "2 kept, 2 from peers (1.22 GB), 0 from the checkpoint",
  // or "checkpoint" when every rank read it (and in records older than state from peers).
  std::string state = "checkpoint";
};

struct Failure {
  double time = 0;
  int64_t generation = 0;
  int64_t step = 0;
  int rank = -1;
  std::string machine, reason;
};

struct CheckpointMark {
  double time = 0;
  int64_t generation = 0;
  int64_t step = 0;
  double blocked_s = 0, total_s = 0;
};

// A rank's mean compute and wait per step over `steps` steps (rank_steps.jsonl), or the one
// traced step of a generation (`steps` 1, from logs/gen-G/rank-R.trace.json).
struct RankSteps {
  double time = 0;
  int64_t generation = 0;
  int rank = 0, stage = 0;
  int64_t step = 0, steps = 0;
  double compute_s = 0, wait_s = 0;
};

struct Straggler {
  double time = 0;
  int64_t generation = 0;
  int rank = 0, stage = 0;
  std::string machine;
  double compute_s = 0, peer_median_s = 0, ratio = 0;
  int64_t steps = 0;
};

// A machine found slower than its plan expected, and what followed (the `slow_machine` record).
struct SlowMachineMark {
  double time = 0;
  int64_t generation = 0;
  std::string machine;
  double ratio = 0;
  std::string action;  // "replan", "keep", "folded", "none"
  std::string plan;    // the plan taken or kept ("1 x 2, shares 6,2"); "" for none
};

// How the job ended (the `done`, `stopped` or `failed` record), or where it is (state.json).
struct RunEnd {
  std::string state;  // "done", "stopped", "failed"; a running job: state.json's, or "running"
  std::string reason;
  double wall_s = 0;  // the last manager's own measure; see RunReport::WallSeconds
  bool finished = false;
};

// Where per-rank step times came from.
enum class RankSource { kNone, kRankSteps, kTraces };

struct RunReport {
  std::string run_dir;
  std::string program;
  double started = 0;      // the first `start` record
  int managers = 0;        // `start` records: one per `mitra run` on the directory
  int64_t max_steps = 0;   // from state.json; 0 when unknown
  bool tokens = false;     // the program declared tokens per sample
  std::vector<StepPoint> steps;  // in file order
  std::vector<EvalPoint> evals;
  std::vector<GenerationSpan> generations;  // in launch order
  std::vector<Change> changes;
  std::vector<Failure> failures;
  std::vector<CheckpointMark> checkpoints;
  std::vector<RankSteps> rank_steps;
  RankSource rank_source = RankSource::kNone;
  std::vector<Straggler> stragglers;
  std::vector<SlowMachineMark> slow_machines;
  int morphs = 0;  // `morph` records: planned changes asked for
  RunEnd end;
  double last_time = 0;   // the newest record's time
  int skipped_lines = 0;  // records that did not parse (half-written last lines not counted)

  int64_t LastStep() const;
  // Steps trained more than once (after recoveries from an older checkpoint).
  int64_t RepeatedSteps() const;
  // Samples of the steps the final model went through: each step once.
  int64_t Samples() const;
  // From the first start to the newest record.
  double WallSeconds() const;
  double TotalDowntime() const;
  std::optional<double> FinalLoss() const;
};

// Reads RUN_DIR through `fs`. InvalidArgument (naming the fix) when RUN_DIR is not a directory
// or holds no run (neither events.jsonl nor metrics.jsonl). A missing optional file is no error.
Result<RunReport> ReadRunReport(FileSystem& fs, const std::string& run_dir);

}  // namespace mitra::report
