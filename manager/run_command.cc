#include "manager/run_command.h"

#include <algorithm>

#include "common/json.h"
#include "common/strings.h"
#include "checkpoint/store.h"
#include "manager/describe.h"
#include "manager/grid.h"
#include "manager/machine_list.h"
#include "manager/progress.h"
#include "manager/run_dir.h"
#include "manager/run_journal.h"
#include "manager/supervisor.h"

namespace mitra::manager {
namespace {

constexpr double kDescribeTimeoutS = 60;
constexpr const char* kLoopback = "127.0.0.1";

// Prints a (possibly multi-line) message, each line prefixed, and returns the bad-input code.
int BadInput(RunContext& c, const std::string& message) {
  for (const std::string_view line : SplitLines(message)) *c.err << "mitra run: " << line << "\n";
  c.err->flush();
  return kExitBadInput;
}

const std::string* Lookup(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// --threads, else MITRA_THREADS from the manager's environment, else 1.
Result<int> ResolveThreads(const RunOptions& options, const Environment& env) {
  if (options.threads > 0) return options.threads;
  const std::string* value = Lookup(env, "MITRA_THREADS");
  if (value == nullptr) return 1;
  const std::optional<int64_t> n = ParseInt64(*value);
  if (!n || *n < 1 || *n > 4096) {
    return Status::InvalidArgument("MITRA_THREADS='" + *value +
                                   "' in the environment is not a whole number >= 1; fix or "
                                   "unset it, or pass --threads N");
  }
  return static_cast<int>(*n);
}

// --timeout, else MITRA_TIMEOUT_S from the manager's environment, else 30.
Result<double> ResolveTimeout(const RunOptions& options, const Environment& env) {
  if (options.timeout_s > 0) return options.timeout_s;
  const std::string* value = Lookup(env, "MITRA_TIMEOUT_S");
  if (value == nullptr) return 30.0;
  const std::optional<double> s = ParseDouble(*value);
  if (!s || *s <= 0) {
    return Status::InvalidArgument("MITRA_TIMEOUT_S='" + *value +
                                   "' in the environment is not a positive number of seconds; "
                                   "fix or unset it, or pass --timeout S");
  }
  return *s;
}

std::string Plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

void PrintPlan(RunContext& c, const MachineList& machines, const GridPlan& plan,
               const ProgramDescription& description, const RunDir& run_dir) {
  std::vector<std::string> names;
  for (const Machine& m : machines.machines) {
    names.push_back(m.Address() + " (" + Plural(m.slots, "slot") + ")");
  }
  const int64_t most = ReplicaBatch(plan.global_batch, plan.replicas, 0);
  const int64_t least = ReplicaBatch(plan.global_batch, plan.replicas, plan.replicas - 1);
  const std::string per_replica =
      least == most ? std::to_string(most) : std::to_string(least) + "-" + std::to_string(most);
  std::ostream& out = *c.out;
  out << "mitra: machines: " << Join(names, ", ") << "\n";
  out << "mitra: program has " << Plural(description.segments, "segment");
  if (description.tokens_per_sample > 0) {
    out << ", " << FormatSeconds(description.tokens_per_sample) << " tokens per sample";
  }
  out << "\n";
  out << "mitra: shape " << Plural(plan.stages, "stage") << " x "
      << Plural(plan.replicas, "replica") << " = " << Plural(plan.world_size(), "worker")
      << "; batch " << plan.global_batch << " = " << per_replica << " per replica; chunk "
      << plan.chunk_size << "\n";
  if (plan.idle_slots > 0) {
    out << "mitra: " << Plural(plan.idle_slots, "slot") << " left idle (" << plan.total_slots
        << " slots, " << plan.stages << " x " << plan.replicas << " uses " << plan.world_size()
        << ")\n";
  }
  out << "mitra: run directory " << run_dir.path() << std::endl;
}

// The newest checkpoint that verifies (0: none, start fresh). Damaged newer ones are reported
// and skipped; a checkpoint of a model with another number of segments is refused.
Result<int64_t> FindResumeStep(RunContext& c, const std::string& dir,
                               const ProgramDescription& description) {
  std::vector<std::string> skipped;
  Result<checkpoint::Found> found = checkpoint::FindNewestValid(dir, &skipped);
  for (const std::string& why : skipped) *c.err << "mitra run: " << why << "\n";
  if (!found.ok()) return int64_t{0};
  if (static_cast<int64_t>(found->manifest.segments.size()) != description.segments) {
    return Status::InvalidArgument(
        "checkpoint " + found->path + " holds a model of " +
        std::to_string(found->manifest.segments.size()) + " segments but the program has " +
        std::to_string(description.segments) +
        ": it belongs to another model; pass another --checkpoint-dir (nothing was changed)");
  }
  *c.out << "mitra: resuming from " << found->path << " (step " << found->step << ", written by "
         << found->manifest.stages << " x " << found->manifest.replicas << ")" << std::endl;
  return found->step;
}

}  // namespace

int RunCommand(const RunOptions& options, RunContext& c) {
  // 1. Everything that can be checked without running the program.
  Result<MachineList> machines =
      LoadMachineList(*c.fs, options.machines_path, options.gpus_per_node);
  if (!machines.ok()) return BadInput(c, machines.status().message());
  for (const Machine& m : machines->machines) {
    if (!m.IsLocal()) {
      return BadInput(c, options.machines_path + ":" + std::to_string(m.line) + ": '" +
                             m.Address() +
                             "' is a remote host; this version of mitra runs workers on this "
                             "machine only (remote hosts arrive with the SSH launcher). Use "
                             "`localhost slots=N`");
    }
  }
  Result<int> threads = ResolveThreads(options, c.environment);
  if (!threads.ok()) return BadInput(c, threads.status().message());
  Result<double> timeout_s = ResolveTimeout(options, c.environment);
  if (!timeout_s.ok()) return BadInput(c, timeout_s.status().message());
  const std::string* search_path = Lookup(c.environment, "PATH");
  Result<std::string> program =
      c.runner->ResolveProgram(options.program, search_path ? *search_path : "");
  if (!program.ok()) return BadInput(c, program.status().message());

  GridRequest request;
  for (const Machine& m : machines->machines) request.slots_per_machine.push_back(m.slots);
  request.stages = options.stages;
  request.segments = options.stages;  // unknown yet: checked after the program describes itself
  request.global_batch = options.batch_size;
  request.chunk_size = options.chunk_size;
  if (Result<GridPlan> early = PlanGrid(request); !early.ok()) {
    return BadInput(c, early.status().message());
  }
  const RunDir run_dir(NormalizePath(JoinPath(c.working_directory, options.run_dir)));
  if (Status s = run_dir.CheckUsable(*c.fs); !s.ok()) return BadInput(c, s.message());
  const std::string checkpoint_dir = NormalizePath(JoinPath(
      c.working_directory,
      options.checkpoint_dir.empty() ? JoinPath(options.run_dir, "checkpoints")
                                     : options.checkpoint_dir));

  // 2. Ask the program for its shape; plan the grid.
  launcher::ProcessSpec describe;
  describe.program = *program;
  describe.args = options.program_args;
  describe.environment = DescribeEnvironment(c.environment);
  describe.working_directory = c.working_directory;
  const double describe_start_s = c.clock->MonotonicSeconds();
  Result<ProgramDescription> description =
      DescribeProgram(*c.runner, describe, *c.clock, kDescribeTimeoutS);
  if (!description.ok()) return BadInput(c, description.status().message());
  const double describe_s = c.clock->MonotonicSeconds() - describe_start_s;
  request.segments = description->segments;
  Result<GridPlan> plan = PlanGrid(request);
  if (!plan.ok()) return BadInput(c, plan.status().message());
  Result<int64_t> resume_step = FindResumeStep(c, checkpoint_dir, *description);
  if (!resume_step.ok()) return BadInput(c, resume_step.status().message());
  // The last check, because it creates the directory: every input is known good by now.
  if (Status s = checkpoint::CheckWritable(checkpoint_dir); !s.ok()) {
    return BadInput(c, s.message());
  }

  while (std::optional<Event> event = c.events->TryPop()) {
    if (std::holds_alternative<StopRequested>(*event)) {
      *c.err << "mitra run: interrupted before the workers were started; nothing was started"
             << std::endl;
      return kExitFailed;
    }
  }

  // 3. Create the run directory and launch.
  Result<int> port = c.pick_port();
  if (!port.ok()) {
    *c.err << "mitra run: " << port.status().message() << std::endl;
    return kExitFailed;
  }
  LaunchSettings settings;
  settings.rdzv_host = kLoopback;
  settings.rdzv_port = *port;
  settings.generation = run_dir.NextGeneration(*c.fs);
  settings.max_steps = options.max_steps;
  settings.resume_step = *resume_step;
  settings.checkpoint_dir = checkpoint_dir;
  settings.checkpoint_every = options.checkpoint_every;
  settings.keep_checkpoints = options.keep_checkpoints;
  settings.threads = *threads;
  settings.timeout_s = *timeout_s;
  settings.run_dir = run_dir.path();
  if (Status s = run_dir.Create(*c.fs, settings.generation); !s.ok()) {
    return BadInput(c, s.message() + "; pass --run-dir with a directory you can write");
  }
  Result<std::unique_ptr<RunJournal>> journal = RunJournal::Open(c.fs, c.clock, run_dir);
  if (!journal.ok()) {
    return BadInput(c, journal.status().message() + "; pass --run-dir with a writable directory");
  }
  PrintPlan(c, *machines, *plan, *description, run_dir);

  Job job;
  job.plan = *plan;
  job.generation = settings.generation;
  for (const RankPlacement& placement : plan->ranks) {
    launcher::ProcessSpec spec;
    spec.program = *program;
    spec.args = options.program_args;
    spec.environment = WorkerEnvironment(c.environment, *plan, placement, kLoopback, settings);
    spec.working_directory = c.working_directory;
    spec.log_path = run_dir.LogPath(settings.generation, placement.rank);
    job.specs.push_back(std::move(spec));
  }
  job.state_fields.SetInt("manager_pid", c.manager_pid)
      .SetString("run_dir", run_dir.path())
      .SetString("machines_file",
                 NormalizePath(JoinPath(c.working_directory, options.machines_path)))
      .SetString("program", *program)
      .Set("program_args", JsonValue::StringArray(options.program_args))
      .SetNumber("started_at", c.clock->WallSeconds())
      .SetString("rdzv", std::string(kLoopback) + ":" + std::to_string(*port));
  (void)(*journal)->RecordEvent("start",
                                JsonObject(job.state_fields)
                                    .SetInt("slots", plan->total_slots)
                                    .SetInt("idle_slots", plan->idle_slots)
                                    .SetInt("segments", description->segments)
                                    .SetNumber("tokens_per_sample", description->tokens_per_sample)
                                    .SetNumber("describe_s", RoundedSeconds(describe_s))
                                    .SetInt("threads", *threads)
                                    .SetNumber("timeout_s", *timeout_s));

  SupervisorOptions supervisor_options;
  supervisor_options.stop_timeout_s = options.stop_timeout_s;
  supervisor_options.finish_timeout_s = std::max(60.0, 2 * *timeout_s);
  supervisor_options.max_steps = options.max_steps;
  Supervisor supervisor(std::move(job), supervisor_options, c.runner, c.clock, journal->get(),
                        c.events, c.out, c.err);
  const SupervisorResult result = supervisor.Run();
  return result.outcome == SupervisorResult::Outcome::kFailed ? kExitFailed : kExitOk;
}

}  // namespace mitra::manager
