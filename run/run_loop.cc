#include "run/run_loop.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/overloaded.h"
#include "common/signal_watcher.h"
#include "common/strings.h"
#include "contract/exit_codes.h"
#include "manager/run_records.h"
#include "records/records.h"

namespace mitra::run {
namespace {

// The loop wakes at least this often, so that state.json and the status stay fresh.
constexpr double kMaxWaitS = 0.25;
// The status's machines are listed again at most this often: listing them walks every machine,
// and a generation's start or end brings one event per rank (ready, stopped, exit) at once.
constexpr double kStatusIntervalS = 0.1;

// The controller's options, with the program its launch records name: the loop's.
manager::ControllerOptions NamingProgram(manager::ControllerOptions options,
                                         const WorkerProgram& worker) {
  options.program = worker.program;
  return options;
}

}  // namespace

RunLoop::RunLoop(RunLoopOptions options, manager::ControllerOptions controller_options,
                 Transports* transports, FileSystem* fs, Clock* clock, const RunDir* run_dir,
                 RunJournal* journal, EventQueue* queue, std::ostream* out, std::ostream* err)
    : options_(std::move(options)),
      controller_(NamingProgram(controller_options, options_.worker)),
      transports_(transports),
      fs_(fs),
      clock_(clock),
      run_dir_(run_dir),
      journal_(journal),
      queue_(queue),
      out_(out),
      err_(err),
      first_generation_(controller_options.first_generation),
      max_steps_(controller_options.max_steps),
      reported_(options_.reported.begin(), options_.reported.end()) {}

RunLoop::~RunLoop() {
  for (Check& check : checks_) check.thread.join();
}

int RunLoop::Run(const manager::MachineList& machines, const std::vector<std::string>& unreachable) {
  start_s_ = clock_->MonotonicSeconds();
  Handle(manager::StartInput{machines, unreachable});
  while (!controller_.finished()) {
    CheckPreemption();
    const double now = clock_->MonotonicSeconds();
    double next = controller_.NextDeadline();
    if (!options_.preemption_command.empty()) next = std::min(next, next_preemption_s_);
    const double wait_s = std::clamp(next - now, 0.0, kMaxWaitS);
    std::optional<Event> event = options_.next_event
                                     ? options_.next_event(wait_s)
                                     : queue_->PopFor(std::chrono::duration<double>(wait_s));
    if (!event) {
      Handle(manager::TimerInput{});
      continue;
    }
    std::visit(Overloaded{
                   [this](WorkerEvent& e) { OnWorkerEvent(e); },
                   [this](StopRequested& e) {
                     if (e.signal_number == 0) {
                       Handle(manager::StopInput{"stop requested (mitra stop)", false});
                     } else {
                       Handle(manager::StopInput{SignalName(e.signal_number), true});
                     }
                   },
                   [this](MachineListEdited& e) { OnMachineListEdited(e.contents); },
                   [this](manager::HostChecked& e) { Handle(e); },
                   [this](manager::DrainMachine& e) { Handle(e); },
                   [this](PreemptionChecked& e) { OnPreemptionChecked(e); },
               },
               *event);
  }
  AwaitReleased();
  return exit_code_ < 0 ? kExitFailed : exit_code_;
}

void RunLoop::Handle(const manager::ControllerInput& input) {
  // A heartbeat or the passing of time that the controller takes no action on changes nothing
  // the status shows but its times. They are most of the events (one heartbeat per rank per
  // second).
  const manager::RankReport* report = std::get_if<manager::RankReport>(&input);
  bool changed = !std::holds_alternative<manager::TimerInput>(input) &&
                 !(report != nullptr && report->kind == manager::RankReport::Kind::kHeartbeat);
  inputs_.push_back(input);
  while (!inputs_.empty()) {
    const manager::ControllerInput next = std::move(inputs_.front());
    inputs_.pop_front();
    for (const manager::ControllerAction& action : controller_.Handle(next, clock_->MonotonicSeconds())) {
      Execute(action);
      changed = true;
    }
  }
  WriteState(false);
  PublishStatus(changed);
}

void RunLoop::Execute(const manager::ControllerAction& action) {
  std::visit(Overloaded{
                 [this](const manager::LaunchAction& a) { Launch(a); },
                 [this](const manager::ReleaseAction& a) { Release(a); },
                 [this](const manager::StartStandbyAction& a) { StartStandby(a); },
                 [this](const manager::SignalAction& a) {
                   const LiveRank* live = processes_.Find(a.generation, a.rank);
                   if (live == nullptr || live->runner == nullptr) return;
                   const mitra::Status s = live->runner->Signal(live->id, a.signal_number);
                   if (!s.ok()) *err_ << "mitra: warning: rank " << a.rank << ": " << s.message() << "\n";
                 },
                 [this](const manager::CheckHostAction& a) { StartHealthCheck(a.machine); },
                 [this](const manager::RecordAction& a) { OnRecord(a); },
                 [this](const manager::FinishAction& a) { OnFinish(a); },
             },
             action);
}

void RunLoop::OnMachineListEdited(const std::string& contents) {
  Result<manager::MachineList> list =
      manager::ParseMachineList(contents, options_.machines_path, options_.gpus_per_node);
  if (!list.ok()) {
    for (const std::string_view line : SplitLines(list.status().message())) {
      *err_ << "mitra: " << line << "\n";
    }
    *err_ << "mitra: the machine list was not changed: the previous list stays in force; fix "
          << options_.machines_path << " and save it again" << std::endl;
    Warn(journal_->RecordEvent("machines_rejected",
                               JsonObject().SetString("error", list.status().message())));
    list_rejected_ = list.status().message();
    PublishStatus(true);
    return;
  }
  list_rejected_.clear();
  Handle(manager::MachinesChanged{*list});
}

// ---- Records -----------------------------------------------------------------------------

void RunLoop::OnRecord(const manager::RecordAction& record) {
  JsonObject fields = record.fields;
  Warn(journal_->RecordEvent(record.event, fields));
  last_event_ = JsonObject().SetString("event", record.event);
  for (const auto& [key, value] : fields.fields()) last_event_.Set(key, value);
  last_event_.SetNumber("time", clock_->WallSeconds());
  // A failed rank's report quotes its own words, when it left any.
  if (record.event == "failure" && ReportFailure(record.fields)) return;
  if (record.line.empty()) return;
  (record.error ? *err_ : *out_) << record.line << std::endl;
}

void RunLoop::OnFinish(const manager::FinishAction& finish) {
  const int64_t step = controller_.last_step();
  const double wall_s = clock_->MonotonicSeconds() - start_s_;
  records::End end;
  end.step = step;
  end.wall_s = manager::RoundedSeconds(wall_s);
  if (stats_.last()) {
    end.loss = stats_.last()->loss;
    (stats_.last()->tokens_per_s > 0 ? end.mean_tokens_per_s : end.mean_samples_per_s) =
        stats_.MeanThroughput();
  }
  const std::string summary = manager::FormatSummary(step, wall_s, stats_);
  switch (finish.outcome) {
    case manager::FinishAction::Outcome::kDone:
      final_state_ = records::End::kDone;
      exit_code_ = 0;
      *out_ << "mitra: done: " << summary << std::endl;
      break;
    case manager::FinishAction::Outcome::kStopped:
      final_state_ = records::End::kStopped;
      exit_code_ = 0;
      *out_ << "mitra: stopped at step " << step << " on request: " << summary << std::endl;
      break;
    case manager::FinishAction::Outcome::kFailed:
    case manager::FinishAction::Outcome::kBadConfiguration:
      final_state_ = records::End::kFailed;
      exit_code_ = finish.outcome == manager::FinishAction::Outcome::kFailed ? kExitFailed
                                                                            : kExitBadInput;
      end.reason = finish.reason;
      *err_ << "mitra: failed: " << finish.reason << " (" << summary << ")" << std::endl;
      break;
  }
  Warn(journal_->RecordEvent(final_state_, records::ToJson(end)));
  WriteState(true);
}

void RunLoop::WriteState(bool force) {
  const double now = clock_->MonotonicSeconds();
  if (!force && now - last_state_write_s_ < options_.state_interval_s) return;
  last_state_write_s_ = now;
  manager::StateSnapshot snapshot;
  snapshot.state = final_state_.empty() ? manager::PhaseName(controller_.phase()) : final_state_;
  snapshot.reason = controller_.reason();
  snapshot.step = controller_.last_step();
  snapshot.max_steps = max_steps_;
  snapshot.last_step = stats_.last();
  JsonObject workers;  // rank -> "address pid": what a restarted manager must clean up
  const std::vector<bool> running = controller_.RunningRanksMask();
  for (const auto& [rank, live] : processes_.ranks()) {
    if (live.pid == 0 || rank >= static_cast<int>(running.size()) || !running[rank]) continue;
    snapshot.pids.push_back(live.pid);
    workers.SetString(std::to_string(rank), live.machine + " " + std::to_string(live.pid));
  }
  snapshot.running_workers = static_cast<int>(snapshot.pids.size());
  snapshot.ready_workers = controller_.ReadyRanks();
  snapshot.elapsed_s = now - start_s_;
  snapshot.updated_at = clock_->WallSeconds();
  JsonObject state = manager::StateRecord(options_.job, controller_.plan(),
                                 std::max(first_generation_, controller_.generation()),
                                 snapshot);
  if (final_state_.empty()) state.Set("workers", JsonValue::Raw(workers.ToJson()));
  Warn(journal_->WriteState(state));
}

void RunLoop::PublishStatus(bool changed) {
  const double now = clock_->MonotonicSeconds();
  const double elapsed_s = manager::RoundedSeconds(now - start_s_);
  const double updated_at = clock_->WallSeconds();
  machines_stale_ = machines_stale_ || changed;
  std::optional<std::vector<manager::MachineStatus>> machines;
  if (machines_stale_ &&
      (now - machines_built_s_ >= kStatusIntervalS || controller_.finished())) {
    machines_stale_ = false;
    machines_built_s_ = now;
    machines.emplace();
    const double wall_offset = clock_->WallSeconds() - clock_->MonotonicSeconds();
    for (const manager::MachineView& view : controller_.Machines()) {
      manager::MachineStatus& m = machines->emplace_back();
      m.address = view.machine.Address();
      m.slots = view.machine.slots;
      m.state = manager::MachineStateName(view.state);
      m.used_slots = view.used_slots;
      if (view.state == manager::MachineState::kFailed) m.until = view.retry_at + wall_offset;
      m.reason = view.reason;
    }
    if (options_.observer != nullptr) options_.observer->OnMachines(*machines);
  }
  std::optional<manager::StatusReport> fresh;
  if (changed) {
    manager::StatusReport& status = fresh.emplace();
    status.state = final_state_.empty() ? manager::PhaseName(controller_.phase()) : final_state_;
    status.reason = controller_.reason();
    if (controller_.phase() != manager::Phase::kWaiting) {  // waiting: no shape runs
      status.generation = std::max(first_generation_, controller_.generation());
      status.stages = controller_.plan().stages;
      status.replicas = controller_.plan().replicas;
    }
    status.step = controller_.last_step();
    status.max_steps = max_steps_;
    if (stats_.last()) {
      status.loss = stats_.last()->loss;
      status.samples_per_s = stats_.last()->samples_per_s;
      if (stats_.last()->tokens_per_s > 0) status.tokens_per_s = stats_.last()->tokens_per_s;
    }
    if (last_event_.size() > 0) status.last_event = last_event_;
    status.list_rejected = list_rejected_;
  }
  std::lock_guard<std::mutex> lock(status_mu_);
  if (fresh) {
    fresh->machines = std::move(status_.machines);
    status_ = std::move(*fresh);
  }
  if (machines) status_.machines = std::move(*machines);
  status_.elapsed_s = elapsed_s;
  status_.updated_at = updated_at;
}

JsonObject RunLoop::Status() const {
  manager::StatusReport status;
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    status = status_;
  }
  return status.ToJson();
}

void RunLoop::Warn(const mitra::Status& status) {
  if (status.ok() || journal_warned_) return;
  journal_warned_ = true;
  *err_ << "mitra: warning: cannot write the run directory: " << status.message()
        << "; training goes on" << std::endl;
}

}  // namespace mitra::run
