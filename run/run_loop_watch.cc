// The run loop's watch over the machines and the ranks while a generation trains: health
// checks, each rank's step times and stragglers (stragglers.h), and the preemption command.
// One class with run_loop.cc (the loop), run_loop_launch.cc (launches) and run_loop_output.cc
// (worker output into inputs).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/duration_text.h"
#include "contract/variables.h"
#include "records/records.h"
#include "run/run_loop.h"
#include "run/worker_env.h"

namespace mitra::run {

// ---- Health checks -----------------------------------------------------------------------

void RunLoop::StartHealthCheck(const manager::Machine& machine) {
  if (machine.IsLocal()) {
    inputs_.push_back(manager::HostChecked{machine.Address(), true, ""});
    return;
  }
  Transports* transports = transports_;
  EventQueue* queue = queue_;
  const double timeout_s = options_.health_check_timeout_s;
  std::function<void()> check = [transports, queue, machine, timeout_s] {
    const mitra::Status s = transports->Check(machine, timeout_s);
    queue->Push(manager::HostChecked{machine.Address(), s.ok(), s.message()});
  };
  if (options_.run_health_check) {
    options_.run_health_check(std::move(check));
    return;
  }
  checks_.erase(std::remove_if(checks_.begin(), checks_.end(),
                               [](Check& check) {
                                 if (!check.done->load()) return false;
                                 check.thread.join();
                                 return true;
                               }),
                checks_.end());
  auto done = std::make_shared<std::atomic<bool>>(false);
  checks_.push_back(Check{std::thread([check = std::move(check), done] {
                            check();
                            done->store(true);
                          }),
                          done});
}

// ---- Stragglers ----------------------------------------------------------------------------

void RunLoop::OnStepTimes(const From& from, const contract::message::Heartbeat& beat) {
  const int rank = from.rank;
  const LiveRank* live = processes_.Find(from.generation, rank);
  if (live == nullptr || !stragglers_) return;
  const int64_t steps = beat.steps.value_or(0);
  const double compute_s = beat.compute_s.value_or(-1);
  const double wait_s = beat.wait_s.value_or(-1);
  if (steps <= 0 || steps > 1'000'000'000 || compute_s < 0 || wait_s < 0) return;
  records::RankSteps times;
  times.generation = from.generation;
  times.rank = rank;
  times.stage = stragglers_->StageOf(rank);
  times.step = beat.step.value_or(0);
  times.steps = steps;
  times.compute_s = compute_s;
  times.wait_s = wait_s;
  Warn(journal_->RecordRankSteps(times));
  const std::optional<manager::Straggler> found = stragglers_->Observe(rank, static_cast<int>(steps), compute_s);
  if (!found) return;
  const std::string& machine = live->machine;
  records::Straggler straggler;
  straggler.generation = from.generation;
  straggler.rank = rank;
  straggler.machine = machine;
  straggler.stage = found->stage;
  straggler.compute_s = manager::RoundedSeconds(found->compute_s);
  straggler.peer_median_s = manager::RoundedSeconds(found->peer_median_s);
  straggler.ratio = std::round(found->ratio * 100) / 100;
  straggler.steps = found->steps;
  straggler.drain = options_.exclude_stragglers;
  Warn(journal_->RecordEvent(records::Straggler::kEvent, records::ToJson(straggler)));
  char ratio[16];
  std::snprintf(ratio, sizeof(ratio), "%.1f", found->ratio);
  *err_ << "mitra: rank " << rank << " on " << machine << " is a straggler: "
        << SecondsText(manager::RoundedSeconds(found->compute_s)) << " s of compute per step, " << ratio
        << "x its stage peers' median (" << SecondsText(manager::RoundedSeconds(found->peer_median_s))
        << " s), for "
        << found->steps << " steps"
        << (options_.exclude_stragglers ? "; draining its machine (--exclude-stragglers)"
                                        : "; --exclude-stragglers would drain its machine")
        << std::endl;
  if (options_.exclude_stragglers) {
    Handle(manager::DrainMachine{machine, "straggler: rank " + std::to_string(rank)});
  } else {
    Handle(manager::SlowMachine{machine, found->ratio});  // a plan that gives it less work
  }
}

// ---- Preemption notices ------------------------------------------------------------------

void RunLoop::CheckPreemption() {
  if (options_.preemption_command.empty()) return;
  const double now = clock_->MonotonicSeconds();
  if (now < next_preemption_s_) return;
  next_preemption_s_ = now + options_.preemption_interval_s;
  for (const manager::MachineView& view : controller_.Machines()) {
    if (view.state == manager::MachineState::kRemoved ||
        view.state == manager::MachineState::kDrained) {
      continue;
    }
    const std::string address = view.machine.Address();
    if (preemption_running_.count(address) > 0) continue;
    Result<launcher::ProcessRunner*> runner = transports_->RunnerFor(view.machine);
    if (!runner.ok()) continue;  // unreachable: its health checks say so
    const bool local = view.machine.IsLocal();
    launcher::ProcessSpec spec;
    spec.program = "/bin/sh";
    spec.args = {"-c", options_.preemption_command};
    spec.environment = options_.worker.EnvironmentFor(local);
    spec.environment[contract::kMachine] = address;
    spec.secrets = SecretVariables();  // a MITRA_JOB_TOKEN of the user's own, say
    spec.working_directory = options_.worker.DirectoryFor(local);
    EventQueue* queue = queue_;
    Result<launcher::StartedProcess> started =
        (*runner)->Start(spec, [queue, address](launcher::ProcessEvent event) {
          if (event.kind == launcher::ProcessEvent::Kind::kExited) {
            queue->Push(PreemptionChecked{address, event.exit});
          }
        });
    if (started.ok()) preemption_running_.insert(address);
  }
}

void RunLoop::OnPreemptionChecked(const PreemptionChecked& checked) {
  preemption_running_.erase(checked.address);
  if (checked.exit.ok()) Handle(manager::DrainMachine{checked.address, "preemption notice"});
}

}  // namespace mitra::run
