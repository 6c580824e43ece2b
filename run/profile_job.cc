#include "run/profile_job.h"

#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>

#include "common/blocking_queue.h"
#include "common/duration_text.h"
#include "common/free_port.h"
#include "common/json.h"
#include "common/strings.h"
#include "planner/grid.h"

namespace mitra::run {
namespace {

struct RankEvent {
  int rank = 0;
  launcher::ProcessEvent event;
};

}  // namespace

Result<planner::Profile> ProfileProgram(Transports& transports, const manager::MachineList& list,
                                        const ProfileJobOptions& options, Clock& clock) {
  const int world = list.TotalSlots();
  std::vector<int64_t> sizes;
  for (int64_t m : options.micro_batches) {
    if (m >= 1 && m <= options.global_batch) sizes.push_back(m);
  }
  if (sizes.empty()) {
    return Status::InvalidArgument("no micro-batch size to profile is at most --batch-size " +
                                   std::to_string(options.global_batch));
  }
  // One stage, a replica per slot: every process reaches every other through the global group.
  planner::GridPlan plan;
  plan.stages = 1;
  plan.replicas = world;
  plan.global_batch = options.global_batch;
  plan.chunk_size = 1;
  plan.total_slots = world;
  plan.stage_map = contract::StageMap::Default(1, world);
  contract::ProfileRequest request;
  request.micro_batches = sizes;
  request.repeats = options.repeats;
  for (size_t m = 0; m < list.machines.size(); ++m) {
    request.machines.push_back(list.machines[m].Address());
    request.slots.push_back(list.machines[m].slots);
    for (int s = 0; s < list.machines[m].slots; ++s) {
      planner::RankPlacement r;
      r.rank = static_cast<int>(plan.ranks.size());
      r.machine = static_cast<int>(m);
      r.local_rank = s;
      r.replica = r.rank;
      plan.ranks.push_back(r);
    }
  }
  const manager::Machine& first = list.machines.front();
  LaunchSettings settings;
  settings.rdzv_host = transports.WorkerAddress(first);
  if (first.IsLocal()) {
    Result<int> port = PickFreeTcpPort(settings.rdzv_host);
    if (!port.ok()) return port.status();
    settings.rdzv_port = *port;
  } else {
    settings.rdzv_port = 29400;
  }
  settings.threads = options.threads;
  settings.timeout_s = options.timeout_s;
  settings.heartbeat_s = 0;  // a profile is bounded by options.limit_s, not health-checked
  settings.run_dir = options.log_dir;

  auto queue = std::make_shared<BlockingQueue<RankEvent>>();
  std::vector<std::pair<launcher::ProcessRunner*, launcher::ProcessId>> started;
  auto kill_all = [&] {
    for (const auto& [runner, id] : started) (void)runner->Signal(id, SIGKILL);
  };
  for (const planner::RankPlacement& r : plan.ranks) {
    const manager::Machine& machine = list.machines[r.machine];
    Result<launcher::ProcessRunner*> runner = transports.RunnerFor(machine);
    if (!runner.ok()) {
      kill_all();
      return Status::Unavailable(machine.Address() + ": " + runner.status().message());
    }
    launcher::ProcessSpec spec;
    spec.program = options.worker.program;
    spec.args = options.worker.args;
    spec.environment = WorkerEnvironment(options.worker.EnvironmentFor(machine.IsLocal()), plan,
                                         r, transports.WorkerAddress(machine), settings);
    for (auto& [name, value] : request.ToEnvironment()) spec.environment[name] = std::move(value);
    spec.working_directory = options.worker.DirectoryFor(machine.IsLocal());
    if (!options.log_dir.empty()) {
      spec.log_path = options.log_dir + "/rank-" + std::to_string(r.rank) + ".log";
    }
    const int rank = r.rank;
    Result<launcher::StartedProcess> process = (*runner)->Start(
        spec, [queue, rank](launcher::ProcessEvent event) { queue->Push({rank, std::move(event)}); });
    if (!process.ok()) {
      kill_all();
      return Status::Unavailable("rank " + std::to_string(rank) + " on " + machine.Address() +
                                 " could not be started: " + process.status().message());
    }
    started.emplace_back(*runner, process->id);
  }

  std::map<int, planner::MachineProfile> machines;
  std::optional<planner::CommProfile> comm;
  std::optional<Status> failure;
  int exited = 0;
  const double deadline = clock.MonotonicSeconds() + options.limit_s;
  while (exited < world) {
    const double wait = std::max(0.0, deadline - clock.MonotonicSeconds());
    std::optional<RankEvent> got = queue->PopFor(std::chrono::duration<double>(wait));
    if (!got) {
      kill_all();
      if (!failure) {
        failure = Status::Timeout("the profile did not finish within " +
                                  SecondsText(options.limit_s) + " s");
      }
      // The kills' exits arrive quickly; stop waiting for them after a few seconds.
      const double grace = clock.MonotonicSeconds() + 5;
      while (exited < world) {
        auto late = queue->PopFor(std::chrono::duration<double>(
            std::max(0.0, grace - clock.MonotonicSeconds())));
        if (!late) break;
        if (late->event.kind == launcher::ProcessEvent::Kind::kExited) ++exited;
      }
      break;
    }
    const launcher::ProcessEvent& e = got->event;
    if (e.kind == launcher::ProcessEvent::Kind::kExited) {
      ++exited;
      if (!e.exit.ok() && !failure) {
        std::string what = "rank " + std::to_string(got->rank) + " of the profile " +
                           e.exit.ToString();
        if (!e.last_lines.empty()) {
          what += "; its last output:";
          for (const std::string& line : e.last_lines) what += "\n  | " + line;
        }
        failure = Status::Internal(what);
        kill_all();
      }
      continue;
    }
    Result<JsonObject> record = JsonObject::Parse(e.message);
    if (!record.ok()) continue;
    const std::string kind = record->GetString("event").value_or("");
    const JsonValue* profile = record->Find("profile");
    if (profile == nullptr) continue;
    if (kind == "profile_machine") {
      auto parsed = planner::ParseMachineProfile(profile->string_value());
      const int index = static_cast<int>(record->GetNumber("machine").value_or(-1));
      if (!parsed.ok() || index < 0 || index >= static_cast<int>(list.machines.size())) {
        if (!failure) failure = Status::Internal("rank " + std::to_string(got->rank) +
                                                 " reported a malformed machine profile");
        continue;
      }
      machines[index] = std::move(parsed).value();
    } else if (kind == "profile_comm") {
      auto parsed = planner::ParseCommProfile(profile->string_value());
      if (parsed.ok()) comm = std::move(parsed).value();
    }
  }
  if (failure) return *failure;
  if (static_cast<int>(machines.size()) != static_cast<int>(list.machines.size()) || !comm) {
    return Status::InvalidArgument(
        "'" + options.worker.program + "' did not report a profile (" + std::to_string(machines.size()) +
        " of " + std::to_string(list.machines.size()) + " machines): is it a program built on "
        "mitra::worker's Trainer?");
  }
  planner::Profile profile;
  profile.program = options.worker.program;
  profile.program_args = options.worker.args;
  profile.micro_batches = sizes;
  for (auto& [index, m] : machines) profile.machines.push_back(std::move(m));
  profile.links = std::move(comm->links);
  profile.allreduce = std::move(comm->allreduce);
  profile.step_sync_s = comm->step_sync_s;
  return profile;
}

}  // namespace mitra::run
