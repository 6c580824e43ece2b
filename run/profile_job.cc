#include "run/profile_job.h"

#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "common/blocking_queue.h"
#include "common/duration_text.h"
#include "common/free_port.h"
#include "common/json.h"
#include "common/strings.h"
#include "contract/worker_messages.h"
#include "planner/grid.h"

namespace mitra::run {
namespace {

struct RankEvent {
  int rank = 0;
  launcher::ProcessEvent event;
};

// One stage, a replica per slot: every process reaches every other through the global group.
planner::GridPlan OneReplicaPerSlot(const manager::MachineList& list, int64_t global_batch) {
  const int world = list.TotalSlots();
  planner::GridPlan plan;
  plan.stages = 1;
  plan.replicas = world;
  plan.global_batch = global_batch;
  plan.chunk_size = 1;
  plan.total_slots = world;
  plan.stage_map = contract::StageMap::Default(1, world);
  for (size_t m = 0; m < list.machines.size(); ++m) {
    for (int s = 0; s < list.machines[m].slots; ++s) {
      planner::RankPlacement r;
      r.rank = static_cast<int>(plan.ranks.size());
      r.machine = static_cast<int>(m);
      r.local_rank = s;
      r.replica = r.rank;
      plan.ranks.push_back(r);
    }
  }
  return plan;
}

// Where the ranks meet and how they run: the first machine's address, bounded by the profile's
// time limit rather than health checks.
Result<LaunchSettings> ProfileSettings(Transports& transports, const manager::Machine& first,
                                       const ProfileJobOptions& options) {
  LaunchSettings settings;
  settings.placement.rdzv_host = transports.WorkerAddress(first);
  if (first.IsLocal()) {
    Result<int> port = PickFreeTcpPort(settings.placement.rdzv_host);
    if (!port.ok()) return port.status();
    settings.placement.rdzv_port = *port;
  } else {
    settings.placement.rdzv_port = 29400;
  }
  settings.placement.threads = options.threads;
  settings.placement.timeout_s = options.timeout_s;
  settings.placement.heartbeat_s = 0;  // a profile is bounded by options.limit_s, not health-checked
  settings.placement.run_dir = options.log_dir;
  return settings;
}

// The profile's processes as they run: started one per slot, their events on one queue.
class ProfileRanks {
 public:
  // Starts every rank of `plan`; on an error the ranks already started are killed.
  Status Start(Transports& transports, const manager::MachineList& list,
               const planner::GridPlan& plan, const LaunchSettings& settings,
               const contract::ProfileRequest& request, const ProfileJobOptions& options) {
    for (const planner::RankPlacement& r : plan.ranks) {
      const manager::Machine& machine = list.machines[r.machine];
      Result<launcher::ProcessRunner*> runner = transports.RunnerFor(machine);
      if (!runner.ok()) {
        KillAll();
        return Status::Unavailable(machine.Address() + ": " + runner.status().message());
      }
      launcher::ProcessSpec spec;
      spec.program = options.worker.program;
      spec.args = options.worker.args;
      spec.environment = WorkerEnvironment(options.worker.EnvironmentFor(machine.IsLocal()), plan,
                                           r, transports.WorkerAddress(machine), settings);
      for (auto& [name, value] : request.ToEnvironment()) spec.environment[name] = std::move(value);
      spec.secrets = SecretVariables();
      spec.working_directory = options.worker.DirectoryFor(machine.IsLocal());
      if (!options.log_dir.empty()) {
        spec.log_path = options.log_dir + "/rank-" + std::to_string(r.rank) + ".log";
      }
      const int rank = r.rank;
      auto queue = queue_;
      Result<launcher::StartedProcess> process = (*runner)->Start(
          spec, [queue, rank](launcher::ProcessEvent event) { queue->Push({rank, std::move(event)}); });
      if (!process.ok()) {
        KillAll();
        return Status::Unavailable("rank " + std::to_string(rank) + " on " + machine.Address() +
                                   " could not be started: " + process.status().message());
      }
      started_.emplace_back(*runner, process->id);
    }
    return Status::Ok();
  }

  void KillAll() {
    for (const auto& [runner, id] : started_) (void)runner->Signal(id, SIGKILL);
  }

  // The next event, waiting at most `wait_s`.
  std::optional<RankEvent> Next(double wait_s) {
    return queue_->PopFor(std::chrono::duration<double>(std::max(0.0, wait_s)));
  }

 private:
  std::shared_ptr<BlockingQueue<RankEvent>> queue_ = std::make_shared<BlockingQueue<RankEvent>>();
  std::vector<std::pair<launcher::ProcessRunner*, launcher::ProcessId>> started_;
};

// What the ranks report until every one has exited (or the time limit passed).
struct Reports {
  std::map<int, planner::MachineProfile> machines;  // by machine index
  std::optional<planner::CommProfile> comm;
  std::optional<Status> failure;  // the first
};

// Reads one rank's `profile_machine` or `profile_comm` record into `reports`.
void ReadProfileRecord(const RankEvent& got, size_t machine_count, Reports& reports) {
  Result<contract::ReadMessage> read = contract::ParseWorkerMessage(got.event.message);
  if (!read.ok()) return;
  if (const auto* machine = std::get_if<contract::message::ProfileMachine>(&read->message)) {
    auto parsed = planner::ParseMachineProfile(machine->profile.text);
    const int64_t index = machine->machine;
    if (!parsed.ok() || index < 0 || index >= static_cast<int64_t>(machine_count)) {
      if (!reports.failure) {
        reports.failure = Status::Internal("rank " + std::to_string(got.rank) +
                                           " reported a malformed machine profile");
      }
      return;
    }
    reports.machines[static_cast<int>(index)] = std::move(parsed).value();
  } else if (const auto* comm = std::get_if<contract::message::ProfileComm>(&read->message)) {
    auto parsed = planner::ParseCommProfile(comm->profile.text);
    if (parsed.ok()) reports.comm = std::move(parsed).value();
  }
}

Reports Collect(ProfileRanks& ranks, int world, size_t machine_count,
                const ProfileJobOptions& options, Clock& clock) {
  Reports reports;
  int exited = 0;
  const double deadline = clock.MonotonicSeconds() + options.limit_s;
  while (exited < world) {
    std::optional<RankEvent> got = ranks.Next(deadline - clock.MonotonicSeconds());
    if (!got) {
      ranks.KillAll();
      if (!reports.failure) {
        reports.failure = Status::Timeout("the profile did not finish within " +
                                          SecondsText(options.limit_s) + " s");
      }
      // The kills' exits arrive quickly; stop waiting for them after a few seconds.
      const double grace = clock.MonotonicSeconds() + 5;
      while (exited < world) {
        std::optional<RankEvent> late = ranks.Next(grace - clock.MonotonicSeconds());
        if (!late) break;
        if (late->event.kind == launcher::ProcessEvent::Kind::kExited) ++exited;
      }
      break;
    }
    const launcher::ProcessEvent& e = got->event;
    if (e.kind != launcher::ProcessEvent::Kind::kExited) {
      ReadProfileRecord(*got, machine_count, reports);
      continue;
    }
    ++exited;
    if (!e.exit.ok() && !reports.failure) {
      std::string what =
          "rank " + std::to_string(got->rank) + " of the profile " + e.exit.ToString();
      if (!e.last_lines.empty()) {
        what += "; its last output:";
        for (const std::string& line : e.last_lines) what += "\n  | " + line;
      }
      // Exit code 2 is the worker's refusal of its settings (docs/worker-contract.md): the
      // user's input to fix, as mitra run says of its own bad input.
      const bool refused = e.exit.signal == 0 && !e.exit.lost && e.exit.exit_code == 2;
      reports.failure = refused ? Status::InvalidArgument(what) : Status::Internal(what);
      ranks.KillAll();
    }
  }
  return reports;
}

}  // namespace

Result<planner::Profile> ProfileProgram(Transports& transports, const manager::MachineList& list,
                                        const ProfileJobOptions& options, Clock& clock) {
  std::vector<int64_t> sizes;
  for (int64_t m : options.micro_batches) {
    if (m >= 1 && m <= options.global_batch) sizes.push_back(m);
  }
  if (sizes.empty()) {
    return Status::InvalidArgument("no micro-batch size to profile is at most --batch-size " +
                                   std::to_string(options.global_batch));
  }
  const planner::GridPlan plan = OneReplicaPerSlot(list, options.global_batch);
  contract::ProfileRequest request;
  request.micro_batches = sizes;
  request.repeats = options.repeats;
  for (const manager::Machine& machine : list.machines) {
    request.machines.push_back(machine.Address());
    request.slots.push_back(machine.slots);
  }
  Result<LaunchSettings> settings = ProfileSettings(transports, list.machines.front(), options);
  if (!settings.ok()) return settings.status();

  ProfileRanks ranks;
  if (Status s = ranks.Start(transports, list, plan, *settings, request, options); !s.ok()) {
    return s;
  }
  Reports reports = Collect(ranks, plan.world_size(), list.machines.size(), options, clock);
  if (reports.failure) return *reports.failure;
  if (reports.machines.size() != list.machines.size() || !reports.comm) {
    return Status::InvalidArgument(
        "'" + options.worker.program + "' did not report a profile (" +
        std::to_string(reports.machines.size()) + " of " + std::to_string(list.machines.size()) +
        " machines): is it a program built on mitra::worker's Trainer?");
  }
  planner::Profile profile;
  profile.program = options.worker.program;
  profile.program_args = options.worker.args;
  profile.micro_batches = sizes;
  for (auto& [index, m] : reports.machines) profile.machines.push_back(std::move(m));
  profile.links = std::move(reports.comm->links);
  profile.allreduce = std::move(reports.comm->allreduce);
  profile.step_sync_s = reports.comm->step_sync_s;
  return profile;
}

Result<planner::Profile> LoadProfile(FileSystem& fs, const std::string& path) {
  const std::string file = fs.IsDirectory(path) ? JoinPath(path, "profile.json") : path;
  Result<std::string> text = fs.ReadFile(file);
  if (!text.ok()) {
    return Status::InvalidArgument("no profile at " + file +
                                   ": write one with `mitra profile --out " + path + " ...`");
  }
  return planner::Profile::FromJson(*text, file);
}

}  // namespace mitra::run
