#include "report/plan_validation.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <sstream>

#include "common/strings.h"
#include "records/reader.h"
#include "run/profile_job.h"

namespace mitra::report {
namespace {

// What a run directory recorded of the generation to validate.
struct RecordedRun {
  records::Launch launch;
  records::Settings settings;      // its workers' settings: schedule, partition
  std::vector<double> step_times;  // of its steps, in order
};

// The generation `generation` (-1: the newest); InvalidArgument naming what is missing.
Result<RecordedRun> ReadRecordedRun(const records::RunDirReader& reader, int64_t generation) {
  std::optional<records::Launch> launch;
  const std::vector<records::EventRecord> events = reader.Events();
  for (const records::EventRecord& e : events) {
    if (!e.Is<records::Launch>()) continue;
    records::Launch l = e.As<records::Launch>();
    if (generation >= 0 && l.shape.generation != generation) continue;
    launch = std::move(l);
  }
  if (!launch) {
    return Status::InvalidArgument(
        JoinPath(reader.run_dir(), records::kEventsFile) + " records no launch" +
        (generation >= 0 ? " of generation " + std::to_string(generation) : "") +
        ": give the run directory of a job that ran");
  }
  std::optional<records::Settings> settings;
  for (const records::EventRecord& e : events) {
    if (!e.Is<records::Settings>()) continue;
    records::Settings s = e.As<records::Settings>();
    if (s.generation <= launch->shape.generation) settings = std::move(s);
  }
  if (!settings || !settings->partition) {
    return Status::InvalidArgument(reader.run_dir() +
                                   " records no settings of its workers (schedule, "
                                   "partition): run it with this mitra");
  }
  RecordedRun run{std::move(*launch), std::move(*settings), {}};
  for (const JsonObject& m : reader.Metrics().records) {
    if (!records::StepMetrics::IsStep(m)) continue;
    const auto step = records::FromJson<records::StepMetrics>(m);
    if (step.generation == run.launch.shape.generation) run.step_times.push_back(step.step_time_s);
  }
  return run;
}

// The shape a recorded run trained in, as the simulator's input.
Result<planner::SimulationInput> SimulationOf(const RecordedRun& run,
                                              const planner::Profile& profile) {
  const records::Launch& launch = run.launch;
  planner::SimulationInput in;
  in.profile = &profile;
  in.trace = true;
  in.global_batch = launch.shape.global_batch;
  in.candidate.stages = static_cast<int>(std::max<int64_t>(1, launch.shape.stages));
  in.candidate.replicas = static_cast<int>(std::max<int64_t>(1, launch.shape.replicas));
  in.candidate.chunk_size = std::max<int64_t>(1, launch.shape.chunk_size);
  Result<planner::ScheduleKind> schedule =
      planner::ParseScheduleKind(run.settings.schedule.value_or("1f1b"));
  if (!schedule.ok()) return schedule.status();
  in.candidate.schedule = *schedule;
  in.candidate.recompute = run.settings.recompute.value_or(false);
  in.candidate.zero = run.settings.zero.value_or(false);
  // "5,5", or one list per pipeline: "3,7/5,5".
  std::istringstream pipelines(*run.settings.partition);
  for (std::string one; std::getline(pipelines, one, '/');) {
    std::replace(one.begin(), one.end(), ',', ' ');
    std::istringstream counts(one);
    std::vector<int>& partition = in.candidate.pipelines.emplace_back();
    for (int n; counts >> n;) partition.push_back(n);
  }
  if (!in.candidate.pipelines.empty()) in.candidate.partition = in.candidate.pipelines.front();
  if (in.candidate.pipelines.size() < 2) in.candidate.pipelines.clear();
  in.candidate.shares = launch.shares.value_or(planner::Shares{});
  in.rank_machines = launch.machines;
  return in;
}

// "F12" -> "F", "Bi3.1" (a second chunk's) -> "Bi", "reduce" -> "reduce".
std::string Kind(const std::string& name) {
  size_t end = name.size();
  while (end > 0 && (std::isdigit(static_cast<unsigned char>(name[end - 1])) || name[end - 1] == '.')) {
    --end;
  }
  return name.substr(0, end);
}

std::string Fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, v);
  return buffer;
}

// The median of the steps after the first two (warm-up); 0 for none.
double MedianStep(std::vector<double> step_times, size_t* counted) {
  if (step_times.size() > 2) step_times.erase(step_times.begin(), step_times.begin() + 2);
  std::sort(step_times.begin(), step_times.end());
  *counted = step_times.size();
  return step_times.empty() ? 0 : step_times[step_times.size() / 2];
}

}  // namespace

void StepSplit::Add(const std::string& name, int stage, double seconds) {
  Spent& k = by_kind[Kind(name)];
  k.total_s += seconds;
  ++k.count;
  if (contract::IsComputeSpan(name) && stage >= 0 &&
      stage < static_cast<int>(compute_by_stage.size())) {
    compute_by_stage[stage].total_s += seconds;
  }
}

Result<PlanValidation> ValidatePlan(FileSystem& fs, const std::string& run_dir,
                                    int64_t generation, const std::string& profile_path) {
  const records::RunDirReader reader(&fs, run_dir);
  Result<RecordedRun> run = ReadRecordedRun(reader, generation);
  if (!run.ok()) return run.status();
  Result<planner::Profile> profile = run::LoadProfile(fs, profile_path);
  if (!profile.ok()) return profile.status();
  Result<planner::SimulationInput> in = SimulationOf(*run, *profile);
  if (!in.ok()) return in.status();
  Result<planner::Prediction> predicted = planner::Simulate(*in);
  if (!predicted.ok()) return predicted.status();

  PlanValidation v;
  v.run_dir = run_dir;
  v.generation = run->launch.shape.generation;
  v.shape = in->candidate;
  v.predicted_step_s = predicted->step_s;
  v.measured_step_s = MedianStep(run->step_times, &v.measured_steps);
  const int stages = v.shape.stages;
  v.predicted = StepSplit(stages);
  for (const planner::PredictedOp& op : predicted->ops) {
    v.predicted.Add(op.name, op.rank % stages, op.end - op.start);
  }
  v.measured = StepSplit(stages);
  for (int rank = 0; rank < stages * v.shape.replicas; ++rank) {
    const std::optional<contract::TracedStep> traced = reader.StepTrace(v.generation, rank);
    if (!traced) continue;
    ++v.traced_ranks;
    for (const contract::TracedStep::Span& span : traced->spans) {
      v.measured.Add(span.name, traced->stage, span.duration_us / 1e6);
    }
  }
  return v;
}

std::string FormatPlanValidation(const PlanValidation& v) {
  auto error = [](double predicted, double measured) {
    return measured > 0 ? Fixed(100 * (predicted - measured) / measured, 1) + "%" : std::string("-");
  };
  std::ostringstream out;
  out << "mitra plan: generation " << v.generation << " of " << v.run_dir << ": "
      << v.shape.ToString() << "\n";
  out << "  step         predicted " << Fixed(v.predicted_step_s * 1e3, 1) << " ms  measured "
      << Fixed(v.measured_step_s * 1e3, 1) << " ms (median of " << v.measured_steps
      << " steps)  " << error(v.predicted_step_s, v.measured_step_s) << "\n";
  if (v.traced_ranks == 0) {
    out << "  (no step traces in logs/gen-" << v.generation
        << ": only local workers write them)\n";
    return out.str();
  }
  out << "  compute per stage (one step, all replicas):\n";
  for (int s = 0; s < v.shape.stages; ++s) {
    const double p = v.predicted.compute_by_stage[s].total_s;
    const double m = v.measured.compute_by_stage[s].total_s;
    out << "    stage " << s << "  predicted " << Fixed(p * 1e3, 1) << " ms  measured "
        << Fixed(m * 1e3, 1) << " ms  " << error(p, m) << "\n";
  }
  out << "  per instruction (mean ms; R/Ra/Rg are waits):\n";
  for (const auto& [kind, m] : v.measured.by_kind) {
    const auto p = v.predicted.by_kind.find(kind);
    const double pm = p == v.predicted.by_kind.end() || p->second.count == 0
                          ? 0
                          : p->second.total_s / p->second.count;
    const double mm = m.count ? m.total_s / m.count : 0;
    out << "    " << kind << std::string(8 - std::min<size_t>(7, kind.size()), ' ') << "predicted "
        << Fixed(pm * 1e3, 2) << "  measured " << Fixed(mm * 1e3, 2) << "  (" << m.count
        << " measured)\n";
  }
  return out.str();
}

}  // namespace mitra::report
