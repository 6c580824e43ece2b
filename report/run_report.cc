#include "report/run_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "common/strings.h"
#include "mitra/contract/stage_map.h"
#include "records/reader.h"

namespace mitra::report {
namespace {

GenerationSpan* FindGeneration(RunReport& report, int64_t generation) {
  for (auto it = report.generations.rbegin(); it != report.generations.rend(); ++it) {
    if (it->generation == generation) return &*it;
  }
  return nullptr;
}

void ReadMetrics(const records::RunDirReader& reader, RunReport& report) {
  records::JsonLines metrics = reader.Metrics();
  report.skipped_lines += metrics.skipped;
  for (const JsonObject& r : metrics.records) {
    if (records::EvalMetrics::IsEval(r)) {
      const auto e = records::FromJson<records::EvalMetrics>(r);
      report.last_time = std::max(report.last_time, e.time);
      report.evals.push_back(EvalPoint{e.step, e.time, e.eval_loss, e.eval_accuracy});
      continue;
    }
    if (!records::StepMetrics::IsStep(r)) continue;
    const auto m = records::FromJson<records::StepMetrics>(r);
    report.last_time = std::max(report.last_time, m.time);
    StepPoint p;
    p.step = m.step;
    p.generation = m.generation;
    p.time = m.time;
    p.loss = m.loss;
    p.samples = m.samples;
    p.samples_per_s = m.samples_per_s;
    p.tokens_per_s = m.tokens_per_s.value_or(0);
    p.step_time_s = m.step_time_s;
    if (p.tokens_per_s > 0) report.tokens = true;
    report.steps.push_back(p);
    if (GenerationSpan* g = FindGeneration(report, p.generation)) {
      if (g->first_step == 0) g->first_step = p.step;
      g->last_step = p.step;
      g->ended = std::max(g->ended, p.time);
    }
  }
}

// A generation's span as its `launch` record starts it: its shape, each replica's machine, and
// the shares where they were uneven.
GenerationSpan Launched(const records::Launch& launch, double time) {
  GenerationSpan g;
  g.generation = launch.shape.generation;
  g.stages = static_cast<int>(launch.shape.stages);
  g.replicas = static_cast<int>(launch.shape.replicas);
  g.world_size = static_cast<int>(launch.shape.world_size);
  g.resume_step = launch.resume_step;
  g.launched = g.ended = time;
  if (launch.shares) g.shares = *launch.shares;
  const Result<contract::StageMap> map = contract::StageMap::Parse(launch.shape.stage_to_rank_map);
  for (int d = 0; d < g.replicas; ++d) {  // each replica's first-stage rank's machine
    const int rank = map.ok() && d < static_cast<int>(map->RanksOfStage(0).size())
                         ? map->RanksOfStage(0)[d]
                         : -1;
    const bool known = rank >= 0 && rank < static_cast<int>(launch.machines.size());
    g.share_machines.push_back(known ? launch.machines[rank] : "?");
  }
  return g;
}

void ReadEvent(const records::EventRecord& e, RunReport& report, std::string* pending_cause) {
  const double time = e.time;
  if (e.Is<records::Start>()) {
    const auto start = e.As<records::Start>();
    if (report.managers++ == 0) report.started = time;
    report.program = start.job.program;
    if (start.tokens_per_sample > 0) report.tokens = true;
  } else if (e.Is<records::Launch>()) {
    report.generations.push_back(Launched(e.As<records::Launch>(), time));
  } else if (e.Is<records::Ready>()) {
    if (GenerationSpan* g = FindGeneration(report, e.As<records::Ready>().generation)) {
      g->ready = time;
    }
  } else if (e.Is<records::Morph>()) {
    ++report.morphs;
    *pending_cause = e.As<records::Morph>().reason;
  } else if (e.event == records::Failure::kEvent ||
             e.event == records::Failure::kAfterTrainingEvent) {
    const auto f = records::FromJson<records::Failure>(e.fields);
    report.failures.push_back(Failure{time, f.generation, f.step,
                                      static_cast<int>(f.rank.value_or(-1)),
                                      f.machine.value_or(""), f.reason});
    *pending_cause = f.reason;
  } else if (e.Is<records::FirstStep>()) {
    const auto first = e.As<records::FirstStep>();
    Change c;
    c.kind = first.kind;
    c.cause = *pending_cause;
    c.generation = first.generation;
    c.step = first.step;
    c.shape = first.shape;
    c.time = time;
    c.downtime_s = first.downtime_s;
    c.stop_s = first.stop_s;
    c.relaunch_s = first.relaunch_s;
    c.ready_s = first.ready_s;
    c.load_s = first.load_s;
    c.first_step_s = first.first_step_s;
    c.kept = static_cast<int>(first.kept);
    c.detected = time - c.downtime_s;
    if (first.state_kept.value_or(0) + first.state_peer.value_or(0) > 0) {
      c.state = std::to_string(*first.state_kept) + " kept, " +
                std::to_string(first.state_peer.value_or(0)) + " from peers";
      if (first.peer_bytes.value_or(0) > 0) {
        char moved[32];
        std::snprintf(moved, sizeof moved, " (%.1f MB)", *first.peer_bytes / 1e6);
        c.state += moved;
      }
      c.state += ", " + std::to_string(first.state_checkpoint.value_or(0)) + " from the checkpoint";
    }
    report.changes.push_back(c);
    pending_cause->clear();
  } else if (e.Is<records::Checkpoint>()) {
    const auto c = e.As<records::Checkpoint>();
    report.checkpoints.push_back(CheckpointMark{time, c.generation, c.step, c.blocked_s.value_or(0),
                                                c.total_s.value_or(0)});
  } else if (e.Is<records::Straggler>()) {
    const auto s = e.As<records::Straggler>();
    report.stragglers.push_back(Straggler{time, s.generation, static_cast<int>(s.rank),
                                          static_cast<int>(s.stage), s.machine, s.compute_s,
                                          s.peer_median_s, s.ratio, s.steps});
  } else if (e.event == "slow_machine") {
    report.slow_machines.push_back(
        SlowMachineMark{time, static_cast<int64_t>(e.fields.GetNumber("generation").value_or(0)),
                        e.fields.GetString("machine").value_or(""),
                        e.fields.GetNumber("ratio").value_or(0),
                        e.fields.GetString("action").value_or(""),
                        e.fields.GetString("plan").value_or("")});
  } else if (records::End::IsEnd(e.event)) {
    const auto end = records::FromJson<records::End>(e.fields);
    report.end.state = e.event;
    report.end.reason = end.reason.value_or("");
    report.end.wall_s = end.wall_s;
    report.end.finished = true;
  }
  // Any record of a generation (its workers' and the manager's about it) extends its span.
  const std::optional<double> generation = e.fields.GetNumber("generation");
  if (generation && !e.Is<records::Launch>()) {
    if (GenerationSpan* g = FindGeneration(report, static_cast<int64_t>(*generation))) {
      g->ended = std::max(g->ended, time);
    }
  }
}

void ReadEvents(const records::RunDirReader& reader, RunReport& report) {
  std::string pending_cause;  // what the next `first_step` was caused by
  for (const records::EventRecord& e : reader.Events(&report.skipped_lines)) {
    report.last_time = std::max(report.last_time, e.time);
    // A later `mitra run` on the directory makes an earlier end no longer the end.
    if (e.Is<records::Start>()) report.end = RunEnd{};
    ReadEvent(e, report, &pending_cause);
  }
}

void ReadState(const records::RunDirReader& reader, RunReport& report) {
  const std::optional<records::State> state = reader.ReadState();
  if (!state) return;  // being replaced, or damaged: the records say enough
  report.max_steps = state->max_steps;
  if (!report.end.finished) {
    report.end.state = state->state.empty() || records::State::IsEnd(state->state)
                           ? "running"  // an end state without its end record: not over yet
                           : state->state;
    report.end.reason = state->reason;
  }
}

void ReadRankSteps(const records::RunDirReader& reader, RunReport& report) {
  for (const records::RankSteps& r : reader.RankStepRecords(&report.skipped_lines)) {
    report.rank_steps.push_back(RankSteps{r.time, r.generation, static_cast<int>(r.rank),
                                          static_cast<int>(r.stage), r.step, r.steps, r.compute_s,
                                          r.wait_s});
  }
  if (!report.rank_steps.empty()) report.rank_source = RankSource::kRankSteps;
}

void ReadTraces(const records::RunDirReader& reader, RunReport& report) {
  for (const GenerationSpan& g : report.generations) {
    for (int rank = 0; rank < g.world_size; ++rank) {
      const std::optional<contract::TracedStep> traced = reader.StepTrace(g.generation, rank);
      if (!traced || traced->WallSeconds() <= 0) continue;
      report.rank_steps.push_back(RankSteps{g.launched, g.generation, rank, traced->stage, 0, 1,
                                            traced->ComputeSeconds(), traced->WaitSeconds()});
    }
  }
  if (!report.rank_steps.empty()) report.rank_source = RankSource::kTraces;
}

}  // namespace

std::string GenerationSpan::Shape() const {
  return std::to_string(stages) + " x " + std::to_string(replicas);
}

std::vector<double> GenerationSpan::ShareFractions() const {
  std::vector<double> out;
  int64_t all = 0;
  for (const int64_t share : shares) all += share;
  for (int d = 0; d < replicas; ++d) {
    const bool uneven = all > 0 && d < static_cast<int>(shares.size());
    out.push_back(uneven ? static_cast<double>(shares[d]) / all : 1.0 / replicas);
  }
  return out;
}

int64_t RunReport::LastStep() const { return steps.empty() ? 0 : steps.back().step; }

int64_t RunReport::RepeatedSteps() const {
  std::set<int64_t> seen;
  for (const StepPoint& p : steps) seen.insert(p.step);
  return static_cast<int64_t>(steps.size() - seen.size());
}

int64_t RunReport::Samples() const {
  std::map<int64_t, int64_t> by_step;  // the last time each step was trained
  for (const StepPoint& p : steps) by_step[p.step] = p.samples;
  int64_t total = 0;
  for (const auto& [step, samples] : by_step) total += samples;
  return total;
}

double RunReport::WallSeconds() const {
  if (started > 0 && last_time > started) return last_time - started;
  return end.wall_s;
}

double RunReport::TotalDowntime() const {
  double total = 0;
  for (const Change& c : changes) total += c.downtime_s;
  return total;
}

std::optional<double> RunReport::FinalLoss() const {
  if (steps.empty()) return std::nullopt;
  return steps.back().loss;
}

Result<RunReport> ReadRunReport(FileSystem& fs, const std::string& run_dir) {
  if (!fs.IsDirectory(run_dir)) {
    return Status::InvalidArgument(
        fs.Exists(run_dir) ? run_dir + " is not a directory; give the run directory of a job "
                                       "(the --run-dir of `mitra run`, default mitra-run)"
                           : "no such directory: " + run_dir +
                                 "; give the run directory of a job (the --run-dir of "
                                 "`mitra run`, default mitra-run)");
  }
  const records::RunDirReader reader(&fs, run_dir);
  if (!reader.HasRecords()) {
    return Status::InvalidArgument(
        run_dir + " is not a run directory (it has no events.jsonl or metrics.jsonl); give the "
                  "--run-dir of a job that `mitra run` started");
  }
  RunReport report;
  report.run_dir = run_dir;
  ReadEvents(reader, report);
  ReadMetrics(reader, report);
  ReadState(reader, report);
  ReadRankSteps(reader, report);
  if (report.rank_source == RankSource::kNone) ReadTraces(reader, report);
  if (report.end.state.empty()) report.end.state = "running";
  return report;
}

}  // namespace mitra::report
