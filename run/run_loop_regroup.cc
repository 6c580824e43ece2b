// RunLoop's half of regrouping in place (docs/manager.md): telling parked workers their next
// place or letting them go, starting standby workers, and waiting for released ones at the end.
// One class, run_loop.h.
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "common/file_system.h"
#include "run/run_loop.h"
#include "mitra/contract/park.h"

namespace mitra::run {
namespace {

// The loop's longest wait for an event while released workers exit.
constexpr double kEventWaitS = 0.25;

}  // namespace

void RunLoop::AwaitReleased() {
  // A released worker exits as soon as it reads its line; one that does not is ended with the
  // manager (its input closes) or by the run's clean-up of leftover workers.
  constexpr double kReleaseWaitS = 5;
  const double until = clock_->MonotonicSeconds() + kReleaseWaitS;
  while (!released_.empty()) {
    const double wait_s = until - clock_->MonotonicSeconds();
    if (wait_s <= 0) break;
    std::optional<Event> event = options_.next_event
                                     ? options_.next_event(std::min(wait_s, kEventWaitS))
                                     : queue_->PopFor(std::chrono::duration<double>(
                                           std::min(wait_s, kEventWaitS)));
    if (!event) continue;
    if (WorkerEvent* e = std::get_if<WorkerEvent>(&*event);
        e != nullptr && e->event.kind == launcher::ProcessEvent::Kind::kExited) {
      released_.erase({e->runner, e->event.id});
    }
  }
}

bool RunLoop::Keep(const manager::ParkedWorker& worker, int64_t generation, int rank,
                   const Environment& environment, LiveRank* live, std::string* why) {
  const auto it = parked_.find({worker.generation, worker.rank});
  if (it == parked_.end()) {
    *why = "the parked worker of generation " + std::to_string(worker.generation) + " rank " +
           std::to_string(worker.rank) + " is gone";
    return false;
  }
  LiveRank parked = std::move(it->second);
  parked_.erase(it);
  const mitra::Status sent = parked.runner->SendLine(parked.id, contract::PlacementLine(environment));
  if (!sent.ok()) {
    *why = "the parked worker (pid " + std::to_string(parked.pid) +
           ") could not be told its placement: " + sent.message();
    // It is of no use now; it exits when its input closes or its wait ends, or is killed here.
    (void)parked.runner->Signal(parked.id, SIGKILL);
    return false;
  }
  routes_[{parked.runner, parked.id}] = {generation, rank};
  live->runner = parked.runner;
  live->id = parked.id;
  live->pid = parked.pid;
  return true;
}

void RunLoop::Release(const manager::ReleaseAction& release) {
  for (const manager::ParkedWorker& worker : release.workers) {
    const auto it = parked_.find({worker.generation, worker.rank});
    if (it == parked_.end()) continue;
    const LiveRank& parked = it->second;
    if (!parked.runner->SendLine(parked.id, contract::ExitLine()).ok()) {
      (void)parked.runner->Signal(parked.id, SIGKILL);
    }
    released_.insert({parked.runner, parked.id});
    parked_.erase(it);
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
                                        options_.settings.run_dir);
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
  parked_[{manager::kStandbyGeneration, standby.id}] = live;
  Warn(journal_->RecordEvent("standby", JsonObject()
                                            .SetInt("id", standby.id)
                                            .SetString("machine", machine.Address())
                                            .SetInt("pid", started->pid)));
}

}  // namespace mitra::run
