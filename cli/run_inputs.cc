#include "cli/run_inputs.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include "checkpoint/store.h"
#include "cli/planner_commands.h"
#include "cli/run_command.h"
#include "common/strings.h"
#include "contract/variables.h"
#include "run/control_socket.h"
#include "run/machine_list_file.h"
#include "run/profile_job.h"
#include "run/slurm_allocation.h"

namespace mitra::cli {
namespace {

constexpr double kMachineCheckTimeoutS = 10;

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
  Result<run::MachineListFile> file =
      run::ReadMachineList(*c.fs, options.machines_path, options.gpus_per_node);
  if (!file.ok()) return file.status();
  *text = std::move(file->text);
  return std::move(file->list);
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

// The control socket's path must fit a Unix socket address; checked before anything is created.
Status CheckRunDirSocket(const run::RunDir& run_dir) {
  const std::string path = run::ControlSocketPath(run_dir.path());
  if (path.size() <= run::MaxSocketPathLength()) return Status::Ok();
  return Status::InvalidArgument("--run-dir " + run_dir.path() + " is too long: its control socket " +
                                 path + " needs at most " + std::to_string(run::MaxSocketPathLength()) +
                                 " bytes; pass a shorter --run-dir");
}

// --profile, for a planned job: null when not given.
Result<std::shared_ptr<const planner::Profile>> GivenProfile(const RunOptions& options,
                                                            const RunContext& c) {
  if (options.profile_dir.empty()) return std::shared_ptr<const planner::Profile>();
  Result<planner::Profile> loaded =
      run::LoadProfile(*c.fs, JoinPath(c.working_directory, options.profile_dir));
  if (!loaded.ok()) return loaded.status();
  return std::shared_ptr<const planner::Profile>(
      std::make_shared<planner::Profile>(std::move(loaded).value()));
}

}  // namespace

planner::GridRequest GridRequestFor(const RunOptions& options, const manager::MachineList& machines,
                         bool planned) {
  planner::GridRequest request;
  for (const manager::Machine& m : machines.machines) request.slots_per_machine.push_back(m.slots);
  request.stages = planned ? 1 : options.stages;
  request.segments = request.stages;
  request.global_batch = options.batch_size;
  request.chunk_size = options.chunk_size;
  request.replicas = planned ? 1 : 0;  // a planned job may use fewer replicas than slots
  return request;
}

Result<CheckedInputs> CheckInputs(const RunOptions& options, RunContext& c) {
  CheckedInputs in;
  in.slurm = options.machines_path == run::kSlurmMachines;
  in.machines_path = in.slurm ? std::string(run::kSlurmMachines)
                              : JoinPath(c.working_directory, options.machines_path);
  Result<manager::MachineList> machines = ReadMachines(c, options, &in.machines_text);
  if (!machines.ok()) return machines.status();
  in.machines = std::move(machines).value();
  if (Status s = CheckLauncher(c, options, in.machines); !s.ok()) return s;
  Result<int> threads = ResolveThreads(options, c.environment);
  if (!threads.ok()) return threads.status();
  in.threads = *threads;
  Result<double> timeout_s = ResolveTimeout(options, c.environment);
  if (!timeout_s.ok()) return timeout_s.status();
  in.timeout_s = *timeout_s;
  const std::string* search_path = Lookup(c.environment, "PATH");
  Result<std::string> program =
      c.runner->ResolveProgram(options.program, search_path ? *search_path : "");
  if (!program.ok()) return program.status();
  in.program = std::move(program).value();

  // --nstages with --profile: the planner chooses the rest of the shape for P stages.
  in.planned = options.stages == 0 || !options.profile_dir.empty();
  if (Result<planner::GridPlan> early = PlanGrid(GridRequestFor(options, in.machines, in.planned));
      !early.ok()) {
    return early.status();
  }
  Result<std::shared_ptr<const planner::Profile>> profile = GivenProfile(options, c);
  if (!profile.ok()) return profile.status();
  in.profile = std::move(profile).value();
  in.run_dir = NormalizePath(JoinPath(c.working_directory, options.run_dir));
  if (Status s = run::RunDir(in.run_dir).CheckUsable(*c.fs); !s.ok()) return s;
  in.checkpoint_dir = NormalizePath(JoinPath(
      c.working_directory, options.checkpoint_dir.empty() ? JoinPath(options.run_dir, "checkpoints")
                                                          : options.checkpoint_dir));
  if (c.serve_metrics) {
    if (Status s = c.serve_metrics(); !s.ok()) return s;
  }
  return in;
}

Result<std::vector<std::string>> CheckMachines(const CheckedInputs& inputs, RunContext& c) {
  if (Status s = CheckRunDirSocket(run::RunDir(inputs.run_dir)); !s.ok()) return s;
  std::vector<const manager::Machine*> remote;
  for (const manager::Machine& m : inputs.machines.machines) {
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
  std::vector<std::string> unreachable;
  for (size_t i = 0; i < remote.size(); ++i) {
    if (results[i].ok()) continue;
    if (results[i].code() == Status::Code::kInvalidArgument) {
      return Status::InvalidArgument(remote[i]->Address() + ": " + results[i].message());
    }
    *c.err << "mitra run: warning: " << remote[i]->Address() << " cannot be reached now ("
           << results[i].message() << "); the job starts without it and takes it in once it "
           << "passes a health check" << std::endl;
    unreachable.push_back(remote[i]->Address());
  }
  // The last check, because it creates the directory: every input is known good by now.
  if (Status s = checkpoint::CheckWritable(*c.fs, inputs.checkpoint_dir); !s.ok()) return s;
  return unreachable;
}

}  // namespace mitra::cli
