#include "cli/run_command.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <filesystem>
#include <thread>

#include "common/duration_text.h"
#include "common/json.h"
#include "common/strings.h"
#include "checkpoint/store.h"
#include "run/control_socket.h"
#include "run/describe.h"
#include "planner/grid.h"
#include "manager/machine_list.h"
#include "manager/progress.h"
#include "run/run_dir.h"
#include "run/run_journal.h"
#include "run/orphans.h"
#include "cli/planner_commands.h"
#include "run/profile_job.h"
#include "run/run_loop.h"
#include "run/slurm_allocation.h"
#include "planner/shape_policy.h"
#include "contract/variables.h"
#include "mitra/planner/batch_split.h"

namespace mitra::cli {
namespace {

using planner::GridRequest;
using planner::PlanGrid;

constexpr double kDescribeTimeoutS = 60;
constexpr double kMachineCheckTimeoutS = 10;

// Prints a (possibly multi-line) message, each line prefixed, and returns the bad-input code.
int BadInput(RunContext& c, const std::string& message) {
  for (const std::string_view line : SplitLines(message)) *c.err << "mitra run: " << line << "\n";
  c.err->flush();
  return kExitBadInput;
}

const std::string* Lookup(const contract::Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// --threads, else MITRA_THREADS from the manager's environment, else 1.
Result<int> ResolveThreads(const RunOptions& options, const contract::Environment& env) {
  if (options.threads > 0) return options.threads;
  const std::string* value = Lookup(env, contract::kThreads);
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
Result<double> ResolveTimeout(const RunOptions& options, const contract::Environment& env) {
  if (options.timeout_s > 0) return options.timeout_s;
  const std::string* value = Lookup(env, contract::kTimeoutS);
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

void PrintPlan(RunContext& c, const manager::MachineList& machines, const planner::GridPlan& plan,
               const run::ProgramDescription& description, const run::RunDir& run_dir) {
  std::vector<std::string> names;
  for (const manager::Machine& m : machines.machines) {
    names.push_back(m.Address() + " (" + Plural(m.slots, "slot") + ")");
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
                                                      "depend on its micro-batches)")
      << "\n";
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

// --identity and --known-hosts name files that must exist when SSH machines are listed.
Status CheckSshFiles(const RunOptions& options, const manager::MachineList& machines) {
  const bool remote = std::any_of(machines.machines.begin(), machines.machines.end(),
                                  [](const manager::Machine& m) { return !m.IsLocal(); });
  if (!remote) return Status::Ok();
  for (const auto& [flag, path] : {std::make_pair("--identity", options.identity),
                                   std::make_pair("--known-hosts", options.known_hosts)}) {
    if (path.empty()) continue;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      return Status::InvalidArgument(std::string(flag) + " " + path +
                                     " is not a file; give the path of an existing " +
                                     (std::string(flag) == "--identity"
                                          ? "private key (e.g. ~/.ssh/id_ed25519)"
                                          : "known_hosts file (e.g. ~/.ssh/known_hosts)"));
    }
  }
  return Status::Ok();
}

// The machine list: the file --machines names (its text in `text`, for the watcher), or the
// Slurm allocation's nodes for `--machines slurm`.
Result<manager::MachineList> ReadMachines(RunContext& c, const RunOptions& options, std::string* text) {
  if (options.machines_path == run::kSlurmMachines) {
    const int slots = options.gpus_per_node_given ? options.gpus_per_node : 0;
    if (c.expand_slurm_nodes) return run::SlurmMachineList(c.environment, slots, c.expand_slurm_nodes);
    const contract::Environment& environment = c.environment;
    return run::SlurmMachineList(c.environment, slots, [&environment](const std::string& list) {
      return run::ExpandWithScontrol(list, environment);
    });
  }
  Result<std::string> read = c.fs->ReadFile(options.machines_path);
  if (!read.ok()) {
    // LoadMachineList words a missing or unreadable list best.
    return manager::LoadMachineList(*c.fs, options.machines_path, options.gpus_per_node).status();
  }
  *text = std::move(read).value();
  return manager::ParseMachineList(*text, options.machines_path, options.gpus_per_node);
}

// What the launcher needs: SSH's key files, or for srun an allocation to start steps in and
// machines that are Slurm nodes (no SSH user or port).
Status CheckLauncher(RunContext& c, const RunOptions& options, const manager::MachineList& machines) {
  if (options.launcher == Launcher::kSsh) return CheckSshFiles(options, machines);
  if (Lookup(c.environment, "SLURM_JOB_ID") == nullptr) {
    return Status::InvalidArgument(
        "--launcher srun starts the workers as job steps of the Slurm allocation mitra runs in, "
        "and SLURM_JOB_ID is not set: run it inside one (in an sbatch script, or `salloc "
        "--nodes=2 --ntasks-per-node=4 mitra run ...`), or use --launcher ssh");
  }
  for (const manager::Machine& m : machines.machines) {
    if (!m.IsLocal() && (!m.user.empty() || m.port != 0)) {
      return Status::InvalidArgument(
          "'" + m.Address() + "' names an SSH user or port, which --launcher srun does not use: "
          "list the Slurm node name alone (or use --launcher ssh)");
    }
  }
  return Status::Ok();
}

Status CheckMachines(RunContext& c, const manager::MachineList& machines,
                     std::vector<std::string>* unreachable) {
  std::vector<const manager::Machine*> remote;
  for (const manager::Machine& m : machines.machines) {
    if (!m.IsLocal()) remote.push_back(&m);
  }
  std::vector<Status> results(remote.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < remote.size(); ++i) {
    threads.emplace_back([&c, &remote, &results, i] {
      results[i] = c.transports->Check(*remote[i], kMachineCheckTimeoutS);
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < remote.size(); ++i) {
    if (results[i].ok()) continue;
    if (results[i].code() == Status::Code::kInvalidArgument) {
      return Status::InvalidArgument(remote[i]->Address() + ": " + results[i].message());
    }
    *c.err << "mitra run: warning: " << remote[i]->Address() << " cannot be reached now ("
           << results[i].message() << "); the job starts without it and takes it in once it "
           << "passes a health check" << std::endl;
    unreachable->push_back(remote[i]->Address());
  }
  return Status::Ok();
}

// The control socket's path must fit a Unix socket address; checked before anything is created.
Status CheckRunDirSocket(const run::RunDir& run_dir) {
  const std::string path = run::ControlSocketPath(run_dir.path());
  if (path.size() <= run::MaxSocketPathLength()) return Status::Ok();
  return Status::InvalidArgument("--run-dir " + run_dir.path() + " is too long: its control socket " +
                                 path + " needs at most " + std::to_string(run::MaxSocketPathLength()) +
                                 " bytes; pass a shorter --run-dir");
}

// The profile a planned run plans from: the one kept in the run directory when it was made for
// this program, else a new one, measured now on `machines` and kept there.
Result<std::shared_ptr<const planner::Profile>> ProfileForRun(
    RunContext& c, const RunOptions& options, const std::string& program, const run::RunDir& run_dir,
    const manager::MachineList& machines, const run::ProgramDescription& description, int threads,
    double timeout_s) {
  const std::string dir = JoinPath(run_dir.path(), "profile");
  const std::string file = JoinPath(dir, "profile.json");
  if (Result<planner::Profile> kept = LoadProfile(file);
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

}  // namespace

int RunCommand(const RunOptions& options, RunContext& c) {
  // 1. Everything that can be checked without running the program.
  const bool slurm = options.machines_path == run::kSlurmMachines;
  const std::string machines_path =
      slurm ? std::string(run::kSlurmMachines) : JoinPath(c.working_directory, options.machines_path);
  std::string machines_text;
  Result<manager::MachineList> machines = ReadMachines(c, options, &machines_text);
  if (!machines.ok()) return BadInput(c, machines.status().message());
  if (Status s = CheckLauncher(c, options, *machines); !s.ok()) return BadInput(c, s.message());
  Result<int> threads = ResolveThreads(options, c.environment);
  if (!threads.ok()) return BadInput(c, threads.status().message());
  Result<double> timeout_s = ResolveTimeout(options, c.environment);
  if (!timeout_s.ok()) return BadInput(c, timeout_s.status().message());
  const std::string* search_path = Lookup(c.environment, "PATH");
  Result<std::string> program =
      c.runner->ResolveProgram(options.program, search_path ? *search_path : "");
  if (!program.ok()) return BadInput(c, program.status().message());

  const bool planned = options.stages == 0;  // the planner chooses the shapes
  GridRequest request;
  for (const manager::Machine& m : machines->machines) request.slots_per_machine.push_back(m.slots);
  request.stages = planned ? 1 : options.stages;
  request.segments = request.stages;  // unknown yet: checked after the program describes itself
  request.global_batch = options.batch_size;
  request.chunk_size = options.chunk_size;
  request.replicas = planned ? 1 : 0;  // a planned job may use fewer replicas than slots
  if (Result<planner::GridPlan> early = PlanGrid(request); !early.ok()) {
    return BadInput(c, early.status().message());
  }
  std::shared_ptr<const planner::Profile> given_profile;
  if (!options.profile_dir.empty()) {
    if (!planned) {
      return BadInput(c, "--profile is for planned shapes: leave out --nstages to let the "
                         "planner choose them, or leave out --profile");
    }
    Result<planner::Profile> loaded =
        LoadProfile(JoinPath(c.working_directory, options.profile_dir));
    if (!loaded.ok()) return BadInput(c, loaded.status().message());
    given_profile = std::make_shared<planner::Profile>(std::move(loaded).value());
  }
  const run::RunDir run_dir(NormalizePath(JoinPath(c.working_directory, options.run_dir)));
  if (Status s = run_dir.CheckUsable(*c.fs); !s.ok()) return BadInput(c, s.message());
  const std::string checkpoint_dir = NormalizePath(JoinPath(
      c.working_directory,
      options.checkpoint_dir.empty() ? JoinPath(options.run_dir, "checkpoints")
                                     : options.checkpoint_dir));

  if (c.serve_metrics) {
    if (Status s = c.serve_metrics(); !s.ok()) return BadInput(c, s.message());
  }

  // 2. Ask the program for its shape; plan the grid.
  launcher::ProcessSpec describe;
  describe.program = *program;
  describe.args = options.program_args;
  describe.environment = run::DescribeEnvironment(c.environment);
  describe.working_directory = c.working_directory;
  const double describe_start_s = c.clock->MonotonicSeconds();
  Result<run::ProgramDescription> description =
      run::DescribeProgram(*c.runner, describe, *c.clock, kDescribeTimeoutS);
  if (!description.ok()) return BadInput(c, description.status().message());
  const double describe_s = c.clock->MonotonicSeconds() - describe_start_s;
  request.segments = description->segments;
  request.chunk_kept = !description->micro_batch_independent;
  Result<planner::GridPlan> plan = PlanGrid(request);
  if (!plan.ok()) return BadInput(c, plan.status().message());
  if (given_profile && given_profile->num_segments() != description->segments) {
    return BadInput(c, "--profile " + options.profile_dir + " profiles a model of " +
                           std::to_string(given_profile->num_segments()) +
                           " segments but the program has " +
                           std::to_string(description->segments) +
                           ": profile this program (mitra profile) or leave out --profile");
  }
  std::vector<std::string> reported;  // damaged checkpoints named on the terminal
  Result<std::optional<checkpoint::Found>> resume =
      FindResumePoint(c, checkpoint_dir, *description, options, &reported);
  if (!resume.ok()) return BadInput(c, resume.status().message());
  const int64_t resume_step = *resume ? (*resume)->step : 0;
  // A planned job keeps a chunk only once it is known: given, or from the checkpoint; else
  // the first plan's, below.
  int chunk_size = KeptChunkSize(c, options, *description, *resume, *plan);
  if (planned && options.chunk_size == 0 && !(*resume && (*resume)->manifest.chunk_size > 0)) {
    chunk_size = 0;
  }
  if (!planned && chunk_size != request.chunk_size) {
    request.chunk_size = chunk_size;
    plan = PlanGrid(request);
    if (!plan.ok()) return BadInput(c, plan.status().message());
  }
  if (options.max_steps > 0 && resume_step >= options.max_steps) {
    *c.out << "mitra: the job is already at step " << resume_step << " of --max-steps "
           << options.max_steps << ": nothing to train (raise --max-steps to go on)" << std::endl;
    return kExitOk;
  }
  if (Status s = CheckRunDirSocket(run_dir); !s.ok()) return BadInput(c, s.message());
  // Every SSH machine once, in parallel: one that refuses us (host key, login) is bad input;
  // one that cannot be reached now starts out of the job and joins once it passes a check.
  std::vector<std::string> unreachable;
  if (Status s = CheckMachines(c, *machines, &unreachable); !s.ok()) {
    return BadInput(c, s.message());
  }
  // The last check, because it creates the directory: every input is known good by now.
  if (Status s = checkpoint::CheckWritable(*c.fs, checkpoint_dir); !s.ok()) {
    return BadInput(c, s.message());
  }

  std::vector<run::Event> early;  // a list edit while the program described itself: keep it
  while (std::optional<run::Event> event = c.events->TryPop()) {
    if (std::holds_alternative<run::StopRequested>(*event)) {
      *c.out << "mitra run: stopped before the workers were started; nothing was started"
             << std::endl;
      return kExitOk;
    }
    early.push_back(std::move(*event));
  }
  for (run::Event& event : early) c.events->Push(std::move(event));

  // 3. Claim the run directory (one manager at a time), clean up after a manager that died on
  //    it, create it and run the job.
  if (c.claim_run_dir) {
    if (Status s = c.fs->CreateDirectories(run_dir.path()); !s.ok()) {
      return BadInput(c, s.message() + "; pass --run-dir with a directory you can write");
    }
    if (Status s = c.claim_run_dir(run_dir.path()); !s.ok()) return BadInput(c, s.message());
  }
  if (run_dir.HoldsRun(*c.fs)) run::KillOrphans(*c.fs, run_dir, *c.transports, *c.out);
  if (c.watch_machine_list && !slurm) {  // an allocation's nodes are fixed: nothing to watch
    if (Status s = c.watch_machine_list(machines_path, machines_text); !s.ok()) {
      *c.err << "mitra run: warning: cannot watch " << options.machines_path << ": "
             << s.message() << "; edits of the list will not be noticed" << std::endl;
    }
  }
  run::LaunchSettings settings;
  settings.generation = run_dir.NextGeneration(*c.fs);
  settings.max_steps = options.max_steps;
  settings.resume_step = resume_step;
  settings.checkpoint_dir = checkpoint_dir;
  settings.checkpoint_every = options.checkpoint_every;
  settings.keep_checkpoints = options.keep_checkpoints;
  settings.threads = *threads;
  settings.precision = options.precision;
  settings.timeout_s = *timeout_s;
  settings.run_dir = run_dir.path();
  if (Status s = run_dir.Create(*c.fs, settings.generation); !s.ok()) {
    return BadInput(c, s.message() + "; pass --run-dir with a directory you can write");
  }
  Result<std::unique_ptr<run::RunJournal>> journal = run::RunJournal::Open(c.fs, c.clock, run_dir, c.observer);
  if (!journal.ok()) {
    return BadInput(c, journal.status().message() + "; pass --run-dir with a writable directory");
  }
  std::shared_ptr<const planner::ShapePolicy> policy;
  if (planned) {
    // The planner's first shape, on the machines that answered; the chunk it picks is kept
    // when the model's results depend on it.
    manager::MachineList usable;
    for (const manager::Machine& m : machines->machines) {
      if (std::find(unreachable.begin(), unreachable.end(), m.Address()) == unreachable.end()) {
        usable.machines.push_back(m);
      }
    }
    Result<std::shared_ptr<const planner::Profile>> profile =
        given_profile ? Result<std::shared_ptr<const planner::Profile>>(given_profile)
                      : ProfileForRun(c, options, *program, run_dir, usable, *description,
                                      *threads, *timeout_s);
    if (!profile.ok()) {
      *c.err << "mitra run: " << profile.status().message() << std::endl;
      return profile.status().code() == Status::Code::kInvalidArgument ? kExitBadInput
                                                                        : kExitFailed;
    }
    auto planned_policy = std::make_shared<planner::PlannedShapePolicy>(*profile);
    planner::ShapeRequest first;
    for (const manager::Machine& m : usable.machines) first.machines.push_back({m.Address(), m.slots});
    first.segments = description->segments;
    first.global_batch = options.batch_size;
    first.chunk_size = chunk_size;
    first.chunk_kept = !description->micro_batch_independent;
    Result<planner::GridPlan> chosen = planned_policy->Plan(first);
    if (!chosen.ok()) return BadInput(c, "the planner found no shape: " + chosen.status().message());
    if (chunk_size == 0 && !description->micro_batch_independent) chunk_size = chosen->chunk_size;
    plan = std::move(chosen);
    policy = planned_policy;
  }
  PrintPlan(c, *machines, *plan, *description, run_dir);

  JsonObject job_fields;
  job_fields.SetInt("manager_pid", c.manager_pid)
      .SetString("run_dir", run_dir.path())
      .SetString("machines_file", slurm ? machines_path : NormalizePath(machines_path))
      .SetString("program", *program)
      .Set("program_args", JsonValue::StringArray(options.program_args))
      .SetNumber("started_at", c.clock->WallSeconds());
  (void)(*journal)->RecordEvent("start",
                                JsonObject(job_fields)
                                    .SetInt("slots", plan->total_slots)
                                    .SetInt("idle_slots", plan->idle_slots)
                                    .SetInt("segments", description->segments)
                                    .SetNumber("tokens_per_sample", description->tokens_per_sample)
                                    .SetNumber("describe_s", manager::RoundedSeconds(describe_s))
                                    .SetInt("threads", *threads)
                                    .SetNumber("timeout_s", *timeout_s));

  manager::ControllerOptions controller_options;
  controller_options.stages = options.stages;
  controller_options.policy = policy;
  controller_options.segments = description->segments;
  controller_options.global_batch = options.batch_size;
  controller_options.chunk_size = chunk_size;
  controller_options.max_steps = options.max_steps;
  controller_options.stop_timeout_s = options.stop_timeout_s;
  controller_options.finish_timeout_s = std::max(60.0, 2 * *timeout_s);
  controller_options.startup_timeout_s = std::max(120.0, 4 * *timeout_s);
  controller_options.heartbeat_timeout_s = options.heartbeat_timeout_s;
  // A worker's first heartbeat comes once its program has loaded and reached mitra: seconds.
  controller_options.first_heartbeat_timeout_s = std::max(10.0, 2 * options.heartbeat_timeout_s);
  controller_options.max_restarts = options.max_restarts;
  // Spares are parked workers: a launcher that cannot tell them a place cannot use them.
  controller_options.spares = options.no_regroup ? 0 : options.spares;
  controller_options.start_step = resume_step;
  controller_options.first_generation = settings.generation;

  run::RunLoopOptions loop_options;
  loop_options.worker = run::WorkerProgram::Make(*program, options.program_args, c.environment,
                                            options.env, c.working_directory, options.code_dir);
  loop_options.machines_path = options.machines_path;
  loop_options.gpus_per_node = options.gpus_per_node;
  loop_options.settings = settings;
  loop_options.state_fields = job_fields;
  loop_options.reported = reported;
  loop_options.preemption_command = options.preemption_command;
  loop_options.preemption_interval_s = options.preemption_interval_s;
  loop_options.exclude_stragglers = options.exclude_stragglers;
  loop_options.regroup = !options.no_regroup;
  loop_options.observer = c.observer;
  if (c.prepare_loop) c.prepare_loop(&loop_options);
  run::RunLoop loop(std::move(loop_options), controller_options, c.transports, c.fs, c.clock,
               &run_dir, journal->get(), c.events, c.out, c.err);
  if (c.on_loop_started) c.on_loop_started(&loop);
  const int code = loop.Run(*machines, unreachable);
  if (c.on_loop_started) c.on_loop_started(nullptr);
  return code;
}

}  // namespace mitra::cli
