// The run loop's launches: a generation's ranks started as processes or handed to parked
// workers, standby workers started, parked workers let go. One class with run_loop.cc.
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "common/file_system.h"
#include "common/strings.h"
#include "contract/park.h"
#include "records/records.h"
#include "run/run_loop.h"

namespace mitra::run {
namespace {

// Rendezvous ports on machines where the manager cannot ask the kernel for a free one.
constexpr int kRemoteRendezvousBasePort = 29500;
// The loop's longest wait for an event while released workers exit.
constexpr double kEventWaitS = 0.25;

bool IsLoopback(const std::string& address) { return StartsWith(address, "127."); }

}  // namespace

void RunLoop::Launch(const manager::LaunchAction& launch) {
  const double begin = clock_->MonotonicSeconds();
  BeginGeneration(launch);
  LaunchSettings settings = GenerationSettings(launch);
  const manager::Machine& first = launch.machines[launch.plan.ranks[0].machine];
  const Result<int> port = RendezvousPort(first, launch.generation);
  settings.placement.rdzv_host = transports_->WorkerAddress(first);
  settings.placement.rdzv_port = port.ok() ? *port : 0;

  manager::GenerationLaunched launched;
  launched.generation = launch.generation;
  launched.pids.assign(launch.plan.world_size(), 0);
  launched.resume_step = settings.placement.resume_step;
  launched.rendezvous = settings.placement.rdzv_host + ":" + std::to_string(settings.placement.rdzv_port);
  std::vector<manager::ControllerInput> ranks;
  for (const RankPlacement& placement : launch.plan.ranks) {
    ranks.push_back(StartRank(launch, placement, settings, port.status(), &launched));
  }
  launched.launch_s = clock_->MonotonicSeconds() - begin;
  // The controller hears of the launch first, then of each rank.
  inputs_.push_back(std::move(launched));
  for (manager::ControllerInput& rank : ranks) inputs_.push_back(std::move(rank));
  WriteState(true);
}

void RunLoop::BeginGeneration(const manager::LaunchAction& launch) {
  processes_.BeginGeneration(launch.generation);
  std::vector<int> stage_of_rank(launch.plan.world_size(), -1);
  const GridPlan& plan = launch.plan;
  // What the plan expects of each rank: the profile's prediction, else its replica's share.
  std::vector<double> expected = plan.expected_compute_s;
  const bool by_share = expected.empty() && !plan.shares.empty();
  if (by_share) expected.resize(plan.world_size());
  for (int stage = 0; stage < plan.stage_map.num_stages(); ++stage) {
    const std::vector<int>& ranks = plan.stage_map.RanksOfStage(stage);
    for (size_t replica = 0; replica < ranks.size(); ++replica) {
      stage_of_rank[ranks[replica]] = stage;
      if (by_share) expected[ranks[replica]] = static_cast<double>(plan.shares[replica]);
    }
  }
  stragglers_.emplace(options_.stragglers, std::move(stage_of_rank), std::move(expected));
}

LaunchSettings RunLoop::GenerationSettings(const manager::LaunchAction& launch) {
  LaunchSettings settings = options_.settings;
  settings.placement.generation = launch.generation;
  settings.placement.resume_step = ResumeStep(launch.held_step);
  if (mitra::Status s = run_dir_->Create(*fs_, launch.generation); !s.ok()) Warn(s);
  // Every worker traces one step into its log directory (`mitra plan --validate` reads them);
  // only local ones, where the manager reads their files (RankEnvironment).
  settings.trace_dir = JoinPath(run_dir_->path(), records::GenerationLogDir(launch.generation));
  return settings;
}

int64_t RunLoop::ResumeStep(std::optional<int64_t> held_step) {
  const std::string& dir = options_.settings.placement.checkpoint_dir;
  return checkpoint::ResumeStep(*fs_, dir, held_step, [&] {
    std::vector<std::string> skipped;
    Result<checkpoint::Found> found = options_.find_checkpoint
                                          ? options_.find_checkpoint(dir, &skipped)
                                          : checkpoint::FindNewestValid(*fs_, dir, &skipped);
    for (const std::string& why : skipped) {
      if (reported_.insert(why).second) *err_ << "mitra: " << why << "\n";  // once is enough
    }
    return found;
  });
}

manager::ControllerInput RunLoop::StartRank(const manager::LaunchAction& launch,
                                            const RankPlacement& placement,
                                            const LaunchSettings& settings,
                                            const mitra::Status& port,
                                            manager::GenerationLaunched* launched) {
  const manager::Machine& machine = launch.machines[placement.machine];
  const int rank = placement.rank;
  LiveRank& live = processes_.Add(rank);
  live.machine = machine.Address();
  live.where = machine;
  auto failed = [&](const mitra::Status& why) {
    return manager::RankStartFailed{launch.generation, rank, why.message()};
  };
  if (!port.ok()) return failed(port);
  Result<launcher::ProcessRunner*> runner = transports_->RunnerFor(machine);
  if (!runner.ok()) return failed(runner.status());
  Environment environment = RankEnvironment(launch.plan, placement, machine, settings, **runner);
  if (const auto kept = launch.kept.find(rank); kept != launch.kept.end()) {
    if (mitra::Status s = Keep(kept->second, launch.generation, rank, environment, &live); !s.ok()) {
      return failed(s);
    }
    launched->kept.push_back(rank);
  } else if (mitra::Status s = StartProcess(launch.generation, rank, machine, *runner,
                                            std::move(environment), &live);
             !s.ok()) {
    return failed(s);
  }
  launched->pids[rank] = live.pid;
  return manager::RankStarted{launch.generation, rank, live.pid};
}

Environment RunLoop::RankEnvironment(const GridPlan& plan, const RankPlacement& placement,
                                     const manager::Machine& machine,
                                     const LaunchSettings& settings,
                                     const launcher::ProcessRunner& runner) const {
  LaunchSettings rank_settings = settings;
  if (!machine.IsLocal()) rank_settings.trace_dir.clear();  // not our disk
  rank_settings.placement.park = options_.regroup && runner.CanSendLines();
  return WorkerEnvironment(options_.worker.EnvironmentFor(machine.IsLocal()), plan, placement,
                           transports_->WorkerAddress(machine), rank_settings);
}

mitra::Status RunLoop::StartProcess(int64_t generation, int rank, const manager::Machine& machine,
                                    launcher::ProcessRunner* runner, Environment environment,
                                    LiveRank* live) {
  launcher::ProcessSpec spec;
  spec.program = options_.worker.program;
  spec.args = options_.worker.args;
  spec.environment = std::move(environment);
  spec.secrets = SecretVariables();
  spec.working_directory = options_.worker.DirectoryFor(machine.IsLocal());
  spec.log_path = run_dir_->LogPath(generation, rank);
  EventQueue* queue = queue_;
  Result<launcher::StartedProcess> started =
      runner->Start(spec, [queue, generation, rank, runner](launcher::ProcessEvent event) {
        queue->Push(WorkerEvent{generation, rank, std::move(event), runner});
      });
  if (!started.ok()) return started.status();
  live->runner = runner;
  live->id = started->id;
  live->pid = started->pid;
  live->launched_s = clock_->MonotonicSeconds();
  return mitra::Status::Ok();
}
Result<int> RunLoop::RendezvousPort(const manager::Machine& machine, int64_t generation) {
  const std::string address = transports_->WorkerAddress(machine);
  if (IsLoopback(address)) return options_.pick_port(address);
  // On another machine the manager cannot ask for a free port; a port taken there makes rank 0
  // fail, and the next generation tries the next port.
  return kRemoteRendezvousBasePort + static_cast<int>(generation % 1000);
}

mitra::Status RunLoop::Keep(const manager::ParkedWorker& worker, int64_t generation, int rank,
                           const Environment& environment, LiveRank* live) {
  std::optional<LiveRank> taken = processes_.TakeParked({worker.generation, worker.rank});
  if (!taken) {
    return mitra::Status::Unavailable("the parked worker of generation " +
                                      std::to_string(worker.generation) + " rank " +
                                      std::to_string(worker.rank) + " is gone");
  }
  const LiveRank& parked = *taken;
  const mitra::Status sent = parked.runner->SendLine(parked.id, contract::PlacementLine(environment));
  if (!sent.ok()) {
    // It is of no use now; it exits when its input closes or its wait ends, or is killed here.
    (void)parked.runner->Signal(parked.id, SIGKILL);
    return mitra::Status::Unavailable("the parked worker (pid " + std::to_string(parked.pid) +
                                      ") could not be told its placement: " + sent.message());
  }
  processes_.Kept(parked, {generation, rank});
  live->runner = parked.runner;
  live->id = parked.id;
  live->pid = parked.pid;
  live->launched_s = clock_->MonotonicSeconds();
  return mitra::Status::Ok();
}

void RunLoop::Release(const manager::ReleaseAction& release) {
  for (const manager::ParkedWorker& worker : release.workers) {
    const std::optional<LiveRank> parked =
        processes_.TakeParked({worker.generation, worker.rank});
    if (!parked) continue;
    if (!parked->runner->SendLine(parked->id, contract::ExitLine()).ok()) {
      (void)parked->runner->Signal(parked->id, SIGKILL);
    }
    processes_.Released(*parked);
  }
}

void RunLoop::StartStandby(const manager::StartStandbyAction& standby) {
  const manager::Machine& machine = standby.machine;
  auto failed = [&](const std::string& why) {
    inputs_.push_back(manager::RankStartFailed{manager::kStandbyGeneration, standby.id, why});
  };
  Result<launcher::ProcessRunner*> runner = transports_->RunnerFor(machine);
  if (!runner.ok()) return failed(runner.status().message());
  if (!(*runner)->CanSendLines()) return failed("its launcher cannot hand it a place later");
  launcher::ProcessSpec spec;
  spec.program = options_.worker.program;
  spec.args = options_.worker.args;
  spec.environment = StandbyEnvironment(options_.worker.EnvironmentFor(machine.IsLocal()),
                                        options_.settings.placement.run_dir, standby.stage);
  spec.working_directory = options_.worker.DirectoryFor(machine.IsLocal());
  spec.log_path = JoinPath(run_dir_->path(), "logs/standby-" + std::to_string(standby.id) + ".log");
  EventQueue* queue = queue_;
  const int id = standby.id;
  Result<launcher::StartedProcess> started =
      (*runner)->Start(spec, [queue, id, from = *runner](launcher::ProcessEvent event) {
        queue->Push(WorkerEvent{manager::kStandbyGeneration, id, std::move(event), from});
      });
  if (!started.ok()) return failed(started.status().message());
  LiveRank live;
  live.runner = *runner;
  live.id = started->id;
  live.pid = started->pid;
  live.machine = machine.Address();
  live.where = machine;
  processes_.AddStandby(standby.id, live);
  Warn(journal_->RecordEvent("standby", JsonObject()
                                            .SetInt("id", standby.id)
                                            .SetString("machine", machine.Address())
                                            .SetInt("pid", started->pid)));
}

void RunLoop::AwaitReleased() {
  // A released worker exits as soon as it reads its line; one that does not is ended with the
  // manager (its input closes) or by the run's clean-up of leftover workers.
  constexpr double kReleaseWaitS = 5;
  const double until = clock_->MonotonicSeconds() + kReleaseWaitS;
  while (processes_.AnyReleased()) {
    const double wait_s = until - clock_->MonotonicSeconds();
    if (wait_s <= 0) break;
    std::optional<Event> event = options_.next_event
                                     ? options_.next_event(std::min(wait_s, kEventWaitS))
                                     : queue_->PopFor(std::chrono::duration<double>(
                                           std::min(wait_s, kEventWaitS)));
    if (!event) continue;
    if (WorkerEvent* e = std::get_if<WorkerEvent>(&*event);
        e != nullptr && e->event.kind == launcher::ProcessEvent::Kind::kExited) {
      processes_.Exited({e->runner, e->event.id});
    }
  }
}

}  // namespace mitra::run
