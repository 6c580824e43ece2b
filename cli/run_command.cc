#include "cli/run_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "checkpoint/store.h"
#include "cli/planner_commands.h"
#include "common/duration_text.h"
#include "common/json.h"
#include "common/strings.h"
#include "manager/profile_check.h"
#include "manager/progress.h"
#include "mitra/planner/batch_split.h"
#include "records/reader.h"
#include "records/records.h"
#include "run/orphans.h"
#include "run/profile_job.h"

namespace mitra::cli {
namespace {

using planner::GridRequest;
using planner::PlanGrid;

constexpr double kDescribeTimeoutS = 60;

// Prints a (possibly multi-line) message, each line prefixed, and returns the bad-input code.
int BadInput(RunContext& c, const std::string& message) {
  for (const std::string_view line : SplitLines(message)) *c.err << "mitra run: " << line << "\n";
  c.err->flush();
  return kExitBadInput;
}

std::string Plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// `written_chunk`: the micro-batch size of the checkpoint the job resumes from (0: none).
// `unreachable`: the machines that failed their check at the start; `planned`: the plan is the
// planner's, made on the others (else it counts every listed machine).
void PrintPlan(RunContext& c, const manager::MachineList& machines, const planner::GridPlan& plan,
               const run::ProgramDescription& description, int64_t written_chunk,
               const std::vector<std::string>& unreachable, bool planned,
               const run::RunDir& run_dir) {
  std::vector<std::string> names;
  for (const manager::Machine& m : machines.machines) {
    const bool down =
        std::find(unreachable.begin(), unreachable.end(), m.Address()) != unreachable.end();
    names.push_back(m.Address() + " (" + Plural(m.slots, "slot") + (down ? ", unreachable now" : "") +
                    ")");
  }
  const int64_t most = planner::ShareOf(plan.global_batch, plan.chunk_size, plan.replicas, 0).samples;
  const int64_t least =
      planner::ShareOf(plan.global_batch, plan.chunk_size, plan.replicas, plan.replicas - 1).samples;
  const std::string per_replica =
      least == most ? std::to_string(most) : std::to_string(least) + "-" + std::to_string(most);
  std::ostream& out = *c.out;
  out << "mitra: machines: " << Join(names, ", ") << "\n";
  out << "mitra: program has " << Plural(description.segments, "segment");
  if (description.tokens_per_sample > 0) {
    out << ", " << SecondsText(description.tokens_per_sample) << " tokens per sample";
  }
  out << "\n";
  out << "mitra: shape " << Plural(plan.stages, "stage") << " x "
      << Plural(plan.replicas, "replica") << " = " << Plural(plan.world_size(), "worker")
      << "; batch " << plan.global_batch << " = " << per_replica
      << " per replica; micro-batches of " << plan.chunk_size
      << (description.micro_batch_independent ? "" : " (kept for the job: the model's results "
                                                      "depend on its micro-batches)");
  // A micro-batch independent model may take another size than its checkpoint's: the same
  // function, the sums in another order. Said, so that a changed size is never a surprise.
  if (description.micro_batch_independent && written_chunk > 0 &&
      written_chunk != plan.chunk_size) {
    out << " (the checkpoint's were of " << written_chunk
        << "; the model is micro-batch independent: only the rounding changes)";
  }
  if (!unreachable.empty() && !planned) {
    out << "; that is on every listed machine: the job starts in the shape those that answer "
           "allow";
  }
  out << "\n";
  if (plan.idle_slots > 0) {
    out << "mitra: " << Plural(plan.idle_slots, "slot") << " left idle (" << plan.total_slots
        << " slots, " << plan.stages << " x " << plan.replicas << " uses " << plan.world_size();
    if (!plan.idle_reason.empty()) out << "; " << plan.idle_reason;
    out << ")\n";
  }
  out << "mitra: run directory " << run_dir.path() << std::endl;
}

// The newest checkpoint that verifies (nullopt: none, start fresh). Damaged newer ones are
// reported and skipped; another model's checkpoint (segments, parameter or buffer names or
// shapes) is refused.
Result<std::optional<checkpoint::Found>> FindResumePoint(RunContext& c, const std::string& dir,
                                                        const run::ProgramDescription& description,
                                                        const RunOptions& options,
                                                        std::vector<std::string>* reported) {
  std::vector<std::string>& skipped = *reported;
  Result<checkpoint::Found> found = checkpoint::FindNewestValid(*c.fs, dir, &skipped);
  for (const std::string& why : skipped) *c.err << "mitra run: " << why << "\n";
  if (!found.ok()) return std::optional<checkpoint::Found>();
  if (Status s = run::CheckCheckpointMatches(description, found->manifest, found->path); !s.ok()) {
    return s;
  }
  *c.out << "mitra: resuming from " << found->path << " (step " << found->step << ", written by "
         << found->manifest.stages << " x " << found->manifest.replicas << ")" << std::endl;
  if (found->manifest.global_batch > 0 && found->manifest.global_batch != options.batch_size) {
    *c.err << "mitra run: warning: " << found->path << " was written with --batch-size "
           << found->manifest.global_batch << " and this run uses " << options.batch_size
           << ": from here on the samples differ from those of the job as it began (pass "
           << "--batch-size " << found->manifest.global_batch << " to continue it unchanged)"
           << std::endl;
  }
  return std::optional<checkpoint::Found>(std::move(found).value());
}

// The micro-batch size the job keeps, for a model whose math depends on it: --chunk-size, else
// the one the checkpoint was written with, else the default of the first shape. A --chunk-size
// that differs from the checkpoint's is warned about, like --batch-size. 0 for a model that is
// micro-batch independent and no --chunk-size: each shape takes its own default.
int KeptChunkSize(RunContext& c, const RunOptions& options, const run::ProgramDescription& description,
                  const std::optional<checkpoint::Found>& resume, const planner::GridPlan& first) {
  if (description.micro_batch_independent) return options.chunk_size;
  const int64_t written = resume ? resume->manifest.chunk_size : 0;
  if (options.chunk_size > 0) {
    if (written > 0 && written != options.chunk_size) {
      *c.err << "mitra run: warning: " << resume->path << " was written with --chunk-size "
             << written << " and this run uses " << options.chunk_size << ": the model's "
             << "results depend on its micro-batches, so from here on it trains differently "
             << "(pass --chunk-size " << written << " to continue it unchanged)" << std::endl;
    }
    return options.chunk_size;
  }
  return written > 0 ? static_cast<int>(written) : first.chunk_size;
}

// The profile a planned run plans from: the one kept in the run directory when it was made for
// this program, else a new one, measured now on `machines` and kept there.
Result<std::shared_ptr<const planner::Profile>> ProfileForRun(
    RunContext& c, const RunOptions& options, const std::string& program, const run::RunDir& run_dir,
    const manager::MachineList& machines, const run::ProgramDescription& description, int threads,
    double timeout_s) {
  const std::string dir = JoinPath(run_dir.path(), "profile");
  const std::string file = JoinPath(dir, "profile.json");
  if (Result<planner::Profile> kept = run::LoadProfile(*c.fs, file);
      kept.ok() && kept->program == program && kept->program_args == options.program_args &&
      kept->num_segments() == description.segments) {
    *c.out << "mitra: planning from " << file << std::endl;
    return std::shared_ptr<const planner::Profile>(
        std::make_shared<planner::Profile>(std::move(kept).value()));
  }
  if (machines.machines.empty()) {
    return Status::Unavailable("no machine answers to profile the program on: add machines");
  }
  *c.out << "mitra: profiling the program on " << machines.TotalSlots() << " slots to plan its "
         << "shapes (once: kept in " << dir << "; --profile DIR gives one)" << std::endl;
  if (Status s = c.fs->CreateDirectories(JoinPath(dir, "logs")); !s.ok()) return s;
  run::ProfileJobOptions job;
  job.worker = run::WorkerProgram::Make(program, options.program_args, c.environment, options.env,
                                   c.working_directory, options.code_dir);
  job.global_batch = options.batch_size;
  job.threads = threads;
  job.timeout_s = std::max(600.0, timeout_s);
  job.log_dir = JoinPath(dir, "logs");
  const double start = c.clock->MonotonicSeconds();
  Result<planner::Profile> profile = run::ProfileProgram(*c.transports, machines, job, *c.clock);
  if (!profile.ok()) return profile.status();
  if (Status s = c.fs->WriteFileAtomically(file, profile->ToJson()); !s.ok()) return s;
  *c.out << "mitra: profiled in " << DurationText(c.clock->MonotonicSeconds() - start) << std::endl;
  return std::shared_ptr<const planner::Profile>(
      std::make_shared<planner::Profile>(std::move(profile).value()));
}

// What every launch shares: the run's directories, steps, checkpoints and threads.
run::LaunchSettings SettingsFor(const RunOptions& options, const CheckedInputs& inputs,
                                const ProgramPlan& plan, int64_t first_generation) {
  run::LaunchSettings settings;
  settings.placement.generation = first_generation;
  settings.placement.max_steps = options.max_steps;
  settings.placement.resume_step = plan.resume_step;
  settings.placement.checkpoint_dir = inputs.checkpoint_dir;
  settings.placement.checkpoint_every = options.checkpoint_every;
  settings.placement.keep_checkpoints = options.keep_checkpoints;
  settings.placement.threads = inputs.threads;
  settings.placement.precision = options.precision;
  settings.placement.zero = options.zero;
  settings.placement.timeout_s = inputs.timeout_s;
  settings.placement.run_dir = inputs.run_dir;
  return settings;
}

// state.json's fixed fields, which the `start` record shares.
records::Job JobOf(const RunOptions& options, const CheckedInputs& inputs, const RunContext& c) {
  records::Job job;
  job.manager_pid = c.manager_pid;
  job.run_dir = inputs.run_dir;
  job.machines_file = inputs.slurm ? inputs.machines_path : NormalizePath(inputs.machines_path);
  job.program = inputs.program;
  job.program_args = options.program_args;
  job.started_at = c.clock->WallSeconds();
  return job;
}

void RecordStart(run::RunJournal& journal, const records::Job& job, const CheckedInputs& inputs,
                 const ProgramPlan& plan) {
  records::Start start;
  start.job = job;
  start.slots = plan.plan.total_slots;
  start.idle_slots = plan.plan.idle_slots;
  start.segments = plan.description.segments;
  start.tokens_per_sample = plan.description.tokens_per_sample;
  start.describe_s = manager::RoundedSeconds(plan.describe_s);
  start.threads = inputs.threads;
  start.timeout_s = inputs.timeout_s;
  (void)journal.RecordEvent(records::Start::kEvent, records::ToJson(start));
}

}  // namespace

// ---- 2. The program and its plan -----------------------------------------------------------

Result<ProgramPlan> DescribeAndPlan(const RunOptions& options, const CheckedInputs& inputs,
                                    RunContext& c) {
  ProgramPlan out;
  launcher::ProcessSpec describe;
  describe.program = inputs.program;
  describe.args = options.program_args;
  describe.environment = run::DescribeEnvironment(c.environment);
  describe.working_directory = c.working_directory;
  const double describe_start_s = c.clock->MonotonicSeconds();
  Result<run::ProgramDescription> description =
      run::DescribeProgram(*c.runner, describe, *c.clock, kDescribeTimeoutS);
  if (!description.ok()) return description.status();
  out.description = std::move(description).value();
  out.describe_s = c.clock->MonotonicSeconds() - describe_start_s;

  GridRequest request = GridRequestFor(options, inputs.machines, inputs.planned);
  request.segments = out.description.segments;
  request.chunk_kept = !out.description.micro_batch_independent;
  Result<planner::GridPlan> plan = PlanGrid(request);
  if (!plan.ok()) return plan.status();
  if (inputs.profile && inputs.profile->num_segments() != out.description.segments) {
    return Status::InvalidArgument(
        "--profile " + options.profile_dir + " profiles a model of " +
        std::to_string(inputs.profile->num_segments()) + " segments but the program has " +
        std::to_string(out.description.segments) +
        ": profile this program (mitra profile) or leave out --profile");
  }
  Result<std::optional<checkpoint::Found>> resume =
      FindResumePoint(c, inputs.checkpoint_dir, out.description, options, &out.reported);
  if (!resume.ok()) return resume.status();
  out.resume_step = *resume ? (*resume)->step : 0;
  out.resume_chunk_size = *resume ? (*resume)->manifest.chunk_size : 0;
  // A planned job keeps a chunk only once it is known: given, or from the checkpoint; else
  // its first plan's (PlanFirstShape).
  out.chunk_size = KeptChunkSize(c, options, out.description, *resume, *plan);
  if (inputs.planned && options.chunk_size == 0 &&
      !(*resume && (*resume)->manifest.chunk_size > 0)) {
    out.chunk_size = 0;
  }
  if (!inputs.planned && out.chunk_size != request.chunk_size) {
    request.chunk_size = out.chunk_size;
    plan = PlanGrid(request);
    if (!plan.ok()) return plan.status();
  }
  out.plan = std::move(plan).value();
  return out;
}

bool StopRequestedBeforeStart(RunContext& c) {
  std::vector<run::Event> early;  // a list edit while the program described itself: keep it
  while (std::optional<run::Event> event = c.events->TryPop()) {
    if (std::holds_alternative<run::StopRequested>(*event)) return true;
    early.push_back(std::move(*event));
  }
  for (run::Event& event : early) c.events->Push(std::move(event));
  return false;
}

// ---- 4. The run directory and the first shape ----------------------------------------------

Result<PreparedRunDir> PrepareRunDir(const RunOptions& options, const CheckedInputs& inputs,
                                     const run::RunDir& run_dir, RunContext& c) {
  const std::string writable = "; pass --run-dir with a directory you can write";
  if (c.claim_run_dir) {
    if (Status s = c.fs->CreateDirectories(run_dir.path()); !s.ok()) {
      return Status::InvalidArgument(s.message() + writable);
    }
    if (Status s = c.claim_run_dir(run_dir.path()); !s.ok()) return s;
  }
  if (run_dir.HoldsRun(*c.fs)) run::KillOrphans(*c.fs, run_dir, *c.transports, *c.out);
  if (c.watch_machine_list && !inputs.slurm) {  // an allocation's nodes are fixed
    if (Status s = c.watch_machine_list(inputs.machines_path, inputs.machines_text); !s.ok()) {
      *c.err << "mitra run: warning: cannot watch " << options.machines_path << ": "
             << s.message() << "; edits of the list will not be noticed" << std::endl;
    }
  }
  PreparedRunDir prepared;
  prepared.first_generation = run_dir.NextGeneration(*c.fs);
  if (Status s = run_dir.Create(*c.fs, prepared.first_generation); !s.ok()) {
    return Status::InvalidArgument(s.message() + writable);
  }
  Result<std::unique_ptr<run::RunJournal>> journal =
      run::RunJournal::Open(c.fs, c.clock, run_dir, c.observer);
  if (!journal.ok()) {
    return Status::InvalidArgument(journal.status().message() +
                                   "; pass --run-dir with a writable directory");
  }
  prepared.journal = std::move(journal).value();
  return prepared;
}

Result<std::shared_ptr<const planner::ShapePolicy>> PlanFirstShape(
    const RunOptions& options, const CheckedInputs& inputs, const run::RunDir& run_dir,
    const std::vector<std::string>& unreachable, ProgramPlan* plan, RunContext& c) {
  if (!inputs.planned) return std::shared_ptr<const planner::ShapePolicy>();
  // The planner's first shape, on the machines that answered; the chunk it picks is kept
  // when the model's results depend on it.
  manager::MachineList usable;
  for (const manager::Machine& m : inputs.machines.machines) {
    if (std::find(unreachable.begin(), unreachable.end(), m.Address()) == unreachable.end()) {
      usable.machines.push_back(m);
    }
  }
  Result<std::shared_ptr<const planner::Profile>> profile =
      inputs.profile ? Result<std::shared_ptr<const planner::Profile>>(inputs.profile)
                     : ProfileForRun(c, options, inputs.program, run_dir, usable,
                                     plan->description, inputs.threads, inputs.timeout_s);
  if (!profile.ok()) return profile.status();
  auto policy =
      std::make_shared<planner::PlannedShapePolicy>(*profile, static_cast<int>(options.stages));
  planner::ShapeRequest first;
  for (const manager::Machine& m : usable.machines) first.machines.push_back({m.Address(), m.slots});
  plan->corrections =
      manager::RecordedCorrections(records::RunDirReader(c.fs, run_dir.path()).Events());
  first.corrections = plan->corrections;
  if (!plan->corrections.empty()) {
    std::vector<std::string> measured;
    for (const planner::SpeedCorrection& k : plan->corrections) {
      char factor[32];
      std::snprintf(factor, sizeof factor, "%.2f", k.factor);
      measured.push_back(k.address + " with " + std::to_string(k.busy) + " busy takes " + factor +
                         " times the profile's time");
    }
    *c.out << "mitra: planning with the speeds this run measured before (events.jsonl): "
           << Join(measured, ", ") << std::endl;
  }
  first.segments = plan->description.segments;
  first.global_batch = options.batch_size;
  first.chunk_size = plan->chunk_size;
  first.zero = options.zero;
  first.chunk_kept = !plan->description.micro_batch_independent;
  Result<planner::GridPlan> chosen = policy->Plan(first);
  if (!chosen.ok()) {
    return Status::InvalidArgument("the planner found no shape: " + chosen.status().message());
  }
  if (plan->chunk_size == 0 && !plan->description.micro_batch_independent) {
    plan->chunk_size = chosen->chunk_size;
  }
  plan->plan = std::move(chosen).value();
  return std::shared_ptr<const planner::ShapePolicy>(std::move(policy));
}

// ---- 5. The controller's and the loop's options --------------------------------------------

manager::ControllerOptions ControllerOptionsFor(
    const RunOptions& options, const CheckedInputs& inputs, const ProgramPlan& plan,
    std::shared_ptr<const planner::ShapePolicy> policy, int64_t first_generation) {
  manager::ControllerOptions o;
  o.stages = options.stages;
  o.policy = std::move(policy);
  o.segments = plan.description.segments;
  o.segment_weights = run::SegmentStateElements(plan.description);
  o.global_batch = options.batch_size;
  o.chunk_size = plan.chunk_size;
  o.zero = options.zero;
  o.max_steps = options.max_steps.value_or(0);
  o.stop_timeout_s = options.stop_timeout_s;
  o.finish_timeout_s = std::max(60.0, 2 * inputs.timeout_s);
  o.startup_timeout_s = options.start_timeout_s;
  o.heartbeat_timeout_s = options.heartbeat_timeout_s;
  o.max_restarts = options.max_restarts;
  // Spares are parked workers: a launcher that cannot tell them a place cannot use them.
  o.spares = options.no_regroup ? 0 : options.spares;
  o.start_step = plan.resume_step;
  o.first_generation = first_generation;
  o.corrections = plan.corrections;
  return o;
}

run::RunLoopOptions LoopOptionsFor(const RunOptions& options, const CheckedInputs& inputs,
                                   const ProgramPlan& plan, int64_t first_generation,
                                   const records::Job& job, const RunContext& c) {
  run::RunLoopOptions o;
  o.worker = run::WorkerProgram::Make(inputs.program, options.program_args, c.environment,
                                      options.env, c.working_directory, options.code_dir);
  o.machines_path = options.machines_path;
  o.gpus_per_node = options.gpus_per_node;
  o.settings = SettingsFor(options, inputs, plan, first_generation);
  o.job = job;
  o.reported = plan.reported;
  o.preemption_command = options.preemption_command;
  o.preemption_interval_s = options.preemption_interval_s;
  o.exclude_stragglers = options.exclude_stragglers;
  o.regroup = !options.no_regroup;
  o.observer = c.observer;
  return o;
}

// ---- The command ---------------------------------------------------------------------------

int RunCommand(const RunOptions& options, RunContext& c) {
  Result<CheckedInputs> inputs = CheckInputs(options, c);
  if (!inputs.ok()) return BadInput(c, inputs.status().message());
  Result<ProgramPlan> plan = DescribeAndPlan(options, *inputs, c);
  if (!plan.ok()) return BadInput(c, plan.status().message());
  if (options.max_steps && plan->resume_step >= *options.max_steps) {
    *c.out << "mitra: the job is already at step " << plan->resume_step << " of --max-steps "
           << *options.max_steps << ": nothing to train (raise --max-steps to go on)" << std::endl;
    return kExitOk;
  }
  Result<std::vector<std::string>> unreachable = CheckMachines(*inputs, c);
  if (!unreachable.ok()) return BadInput(c, unreachable.status().message());
  if (StopRequestedBeforeStart(c)) {
    *c.out << "mitra run: stopped before the workers were started; nothing was started"
           << std::endl;
    return kExitOk;
  }

  const run::RunDir run_dir(inputs->run_dir);
  Result<PreparedRunDir> prepared = PrepareRunDir(options, *inputs, run_dir, c);
  if (!prepared.ok()) return BadInput(c, prepared.status().message());
  Result<std::shared_ptr<const planner::ShapePolicy>> policy =
      PlanFirstShape(options, *inputs, run_dir, *unreachable, &*plan, c);
  if (!policy.ok()) {
    const bool bad_input = policy.status().code() == Status::Code::kInvalidArgument;
    if (bad_input) return BadInput(c, policy.status().message());
    *c.err << "mitra run: " << policy.status().message() << std::endl;
    return kExitFailed;
  }
  PrintPlan(c, inputs->machines, plan->plan, plan->description, plan->resume_chunk_size,
            *unreachable, inputs->planned, run_dir);
  const records::Job job = JobOf(options, *inputs, c);
  RecordStart(*prepared->journal, job, *inputs, *plan);

  const int64_t generation = prepared->first_generation;
  run::RunLoopOptions loop_options =
      LoopOptionsFor(options, *inputs, *plan, generation, job, c);
  if (c.prepare_loop) c.prepare_loop(&loop_options);
  run::RunLoop loop(std::move(loop_options),
                    ControllerOptionsFor(options, *inputs, *plan, *policy, generation),
                    c.transports, c.fs, c.clock, &run_dir, prepared->journal.get(), c.events,
                    c.out, c.err);
  if (c.on_loop_started) c.on_loop_started(&loop);
  const int code = loop.Run(inputs->machines, *unreachable);
  if (c.on_loop_started) c.on_loop_started(nullptr);
  return code;
}

}  // namespace mitra::cli
