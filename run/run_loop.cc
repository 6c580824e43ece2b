#include "run/run_loop.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>

#include "common/signal_watcher.h"
#include "common/overloaded.h"
#include "common/strings.h"
#include "mitra/contract/park.h"
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
// Rendezvous ports on machines where the manager cannot ask the kernel for a free one.
constexpr int kRemoteRendezvousBasePort = 29500;

bool IsLoopback(const std::string& address) { return StartsWith(address, "127."); }

// Whether a line a worker printed is one of its heartbeat records (docs/worker-contract.md),
// however the record orders or spaces its fields.
bool IsHeartbeatRecord(std::string_view line) {
  if (!StartsWith(line, launcher::kMessagePrefix)) return false;
  line.remove_prefix(launcher::kMessagePrefix.size());
  const Result<JsonObject> record = JsonObject::Parse(line);
  return record.ok() && record->GetString("event") == "heartbeat";
}

}  // namespace

RunLoop::RunLoop(RunLoopOptions options, manager::ControllerOptions controller_options,
                 Transports* transports, FileSystem* fs, Clock* clock, const RunDir* run_dir,
                 RunJournal* journal, EventQueue* queue, std::ostream* out, std::ostream* err)
    : options_(std::move(options)),
      controller_(controller_options),
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
                   if (a.generation != ranks_generation_) return;
                   const auto it = ranks_.find(a.rank);
                   if (it == ranks_.end() || it->second.runner == nullptr) return;
                   const mitra::Status s = it->second.runner->Signal(it->second.id, a.signal_number);
                   if (!s.ok()) *err_ << "mitra: warning: rank " << a.rank << ": " << s.message() << "\n";
                 },
                 [this](const manager::CheckHostAction& a) { StartHealthCheck(a.machine); },
                 [this](const manager::RecordAction& a) { OnRecord(a); },
                 [this](const manager::FinishAction& a) { OnFinish(a); },
             },
             action);
}

// ---- Launching ---------------------------------------------------------------------------

void RunLoop::Launch(const manager::LaunchAction& launch) {
  const double begin = clock_->MonotonicSeconds();
  const int64_t generation = launch.generation;
  ranks_.clear();
  ranks_generation_ = launch.generation;
  std::vector<int> stage_of_rank(launch.plan.world_size(), -1);
  for (int stage = 0; stage < launch.plan.stage_map.num_stages(); ++stage) {
    for (const int rank : launch.plan.stage_map.RanksOfStage(stage)) stage_of_rank[rank] = stage;
  }
  stragglers_.emplace(options_.stragglers, std::move(stage_of_rank));

  // Which checkpoint the generation resumes from: the newest that verifies.
  LaunchSettings settings = options_.settings;
  settings.generation = generation;
  settings.resume_step = 0;
  std::vector<std::string> skipped;
  Result<checkpoint::Found> found =
      options_.find_checkpoint
          ? options_.find_checkpoint(settings.checkpoint_dir, &skipped)
          : checkpoint::FindNewestValid(*fs_, settings.checkpoint_dir, &skipped);
  for (const std::string& why : skipped) {
    if (reported_.insert(why).second) *err_ << "mitra: " << why << "\n";  // once is enough
  }
  if (found.ok()) settings.resume_step = found->step;
  if (launch.expected_step && settings.resume_step != *launch.expected_step) {
    *err_ << "mitra: warning: the workers stopped after step " << *launch.expected_step
          << " but the newest complete checkpoint is step " << settings.resume_step
          << "; continuing from it" << std::endl;
    Warn(journal_->RecordEvent("step_lost", JsonObject()
                                                .SetInt("expected_step", *launch.expected_step)
                                                .SetInt("resume_step", settings.resume_step)));
  }
  if (mitra::Status s = run_dir_->Create(*fs_, generation); !s.ok()) Warn(s);
  // Every worker traces one step into its log directory (`mitra plan --validate` reads them);
  // only local ones, where the manager reads their files.
  settings.trace_dir = JoinPath(run_dir_->path(), "logs/gen-" + std::to_string(generation));

  const manager::Machine& first = launch.machines[launch.plan.ranks[0].machine];
  settings.rdzv_host = transports_->WorkerAddress(first);
  std::vector<int> kept_ranks;
  Result<int> port = RendezvousPort(first, generation);
  settings.rdzv_port = port.ok() ? *port : 0;

  std::vector<int64_t> pids(launch.plan.world_size(), 0);
  std::vector<manager::ControllerInput> results;
  for (const RankPlacement& placement : launch.plan.ranks) {
    const manager::Machine& machine = launch.machines[placement.machine];
    const int rank = placement.rank;
    LiveRank live;
    live.machine = machine.Address();
    live.where = machine;
    auto fail = [&](const std::string& why) {
      results.push_back(manager::RankStartFailed{launch.generation, rank, why});
      ranks_[rank] = live;
    };
    if (!port.ok()) {
      fail(port.status().message());
      continue;
    }
    Result<launcher::ProcessRunner*> runner = transports_->RunnerFor(machine);
    if (!runner.ok()) {
      fail(runner.status().message());
      continue;
    }
    launcher::ProcessSpec spec;
    spec.program = options_.worker.program;
    spec.args = options_.worker.args;
    LaunchSettings rank_settings = settings;
    if (!machine.IsLocal()) rank_settings.trace_dir.clear();  // not our disk
    rank_settings.park = options_.regroup && (*runner)->CanSendLines();
    spec.environment = WorkerEnvironment(options_.worker.EnvironmentFor(machine.IsLocal()),
                                         launch.plan, placement,
                                         transports_->WorkerAddress(machine), rank_settings);
    if (const auto kept = launch.kept.find(rank); kept != launch.kept.end()) {
      std::string why;
      if (!Keep(kept->second, generation, rank, spec.environment, &live, &why)) {
        fail(why);
        continue;
      }
      kept_ranks.push_back(rank);
      pids[rank] = live.pid;
      ranks_[rank] = live;
      results.push_back(manager::RankStarted{launch.generation, rank, live.pid});
      continue;
    }
    spec.working_directory = options_.worker.DirectoryFor(machine.IsLocal());
    spec.log_path = run_dir_->LogPath(generation, rank);
    EventQueue* queue = queue_;
    const int64_t g = launch.generation;
    Result<launcher::StartedProcess> started =
        (*runner)->Start(spec, [queue, g, rank, from = *runner](launcher::ProcessEvent event) {
          queue->Push(WorkerEvent{g, rank, std::move(event), from});
        });
    if (!started.ok()) {
      fail(started.status().message());
      continue;
    }
    live.runner = *runner;
    live.id = started->id;
    live.pid = started->pid;
    pids[rank] = started->pid;
    ranks_[rank] = live;
    results.push_back(manager::RankStarted{launch.generation, rank, started->pid});
  }
  records::Launch launched = manager::LaunchRecord(launch.plan, generation, options_.worker.program,
                                                  pids, clock_->MonotonicSeconds() - begin);
  for (const RankPlacement& p : launch.plan.ranks) {
    launched.machines.push_back(launch.machines[p.machine].Address());
  }
  launched.kept.assign(kept_ranks.begin(), kept_ranks.end());
  launched.resume_step = settings.resume_step;
  launched.rdzv = settings.rdzv_host + ":" + std::to_string(settings.rdzv_port);
  const JsonObject record = records::ToJson(launched);
  Warn(journal_->RecordEvent(records::Launch::kEvent, record));
  last_event_ = JsonObject(record).SetString("event", "launch");

  std::vector<std::string> pid_text;
  int started = 0;
  for (const int64_t pid : pids) {
    pid_text.push_back(pid > 0 ? std::to_string(pid) : "-");
    started += pid > 0;
  }
  const int kept = static_cast<int>(kept_ranks.size());
  started -= kept;
  if (started + kept == 0) {
    *err_ << "mitra: generation " << generation << " (" << launch.plan.stages << " x "
          << launch.plan.replicas << "): no worker could be started" << std::endl;
  } else {
    *out_ << "mitra: ";
    if (started > 0) *out_ << "launched " << started << (started == 1 ? " worker" : " workers");
    if (started > 0 && kept > 0) *out_ << " and ";
    if (kept > 0) *out_ << "kept " << kept << " parked " << (kept == 1 ? "worker" : "workers");
    *out_ << " (generation " << generation << ", " << launch.plan.stages << " x "
          << launch.plan.replicas;
    if (settings.resume_step > 0) *out_ << ", from step " << settings.resume_step;
    *out_ << "), pids " << Join(pid_text, " ") << std::endl;
  }
  for (manager::ControllerInput& input : results) inputs_.push_back(std::move(input));
  WriteState(true);
}

Result<int> RunLoop::RendezvousPort(const manager::Machine& machine, int64_t generation) {
  const std::string address = transports_->WorkerAddress(machine);
  if (IsLoopback(address)) return options_.pick_port(address);
  // On another machine the manager cannot ask for a free port; a port taken there makes rank 0
  // fail, and the next generation tries the next port.
  return kRemoteRendezvousBasePort + static_cast<int>(generation % 1000);
}

// ---- Worker output -----------------------------------------------------------------------

void RunLoop::OnWorkerEvent(WorkerEvent& event) {
  const ProcessKey key{event.runner, event.event.id};
  if (const auto route = routes_.find(key); route != routes_.end()) {
    std::tie(event.generation, event.rank) = route->second;  // a kept worker's new place
  }
  if (event.event.kind == launcher::ProcessEvent::Kind::kExited) {
    routes_.erase(key);
    released_.erase(key);
    for (auto it = parked_.begin(); it != parked_.end(); ++it) {
      if (it->second.runner == event.runner && it->second.id == event.event.id) {
        parked_.erase(it);  // gone while parked: nothing will keep it
        break;
      }
    }
  }
  if (event.event.kind == launcher::ProcessEvent::Kind::kMessage) {
    OnMessage(event.generation, event.rank, event.event.message);
    return;
  }
  if (event.generation == ranks_generation_) {
    const auto it = ranks_.find(event.rank);
    if (it != ranks_.end()) {
      it->second.last_lines = event.event.last_lines;
      Warn(journal_->RecordEvent(
          "worker_exit",
          manager::WorkerExitRecord(event.rank, static_cast<int>(it->second.pid), event.event.exit,
                           it->second.stopped_record, clock_->MonotonicSeconds() - start_s_)
              .SetInt("generation", event.generation)
              .SetString("machine", it->second.machine)
              .SetBool("lost", event.event.exit.lost)));
    }
  }
  Handle(manager::RankExited{event.generation, event.rank, event.event.exit});
}

void RunLoop::OnMessage(int64_t generation, int rank, const std::string& text) {
  Result<JsonObject> parsed = JsonObject::Parse(text);
  if (!parsed.ok()) {
    Warn(journal_->RecordEvent("bad_message", JsonObject()
                                                  .SetInt("rank", rank)
                                                  .SetString("error", parsed.status().message())
                                                  .SetString("text", text.substr(0, 200))));
    return;
  }
  const std::string kind = parsed->GetString("event").value_or("");
  manager::RankReport report{generation, rank, manager::RankReport::Kind::kHeartbeat, 0};
  if (kind == "ready") {
    report.kind = manager::RankReport::Kind::kReady;
    report.can_park = parsed->Find("park") != nullptr && parsed->Find("park")->bool_value();
  } else if (kind == "parked") {
    report.kind = manager::RankReport::Kind::kParked;
    report.step = static_cast<int64_t>(parsed->GetNumber("step").value_or(0));
    if (generation == ranks_generation_) {
      if (const auto it = ranks_.find(rank); it != ranks_.end() && it->second.runner != nullptr) {
        parked_[{generation, rank}] = it->second;
      }
    }
  } else if (kind == "heartbeat") {
    report.kind = manager::RankReport::Kind::kHeartbeat;
    if (parsed->Find("steps") != nullptr) OnStepTimes(generation, rank, *parsed);
  } else if (kind == "step" && rank == 0) {
    const std::optional<manager::StepRecord> step = manager::StepRecord::FromJson(*parsed);
    if (!step) return;
    if (generation == ranks_generation_) {
      Warn(journal_->RecordStep(
          manager::MetricsRecord(*parsed, controller_.plan(), generation)));
      stats_.Add(*step, clock_->MonotonicSeconds());
      *out_ << manager::FormatProgressLine(*step, max_steps_, stats_.EtaSeconds(max_steps_)) << std::endl;
    }
    report.kind = manager::RankReport::Kind::kStep;
    report.step = step->step;
  } else if (kind == "stopped") {
    report.kind = manager::RankReport::Kind::kStopped;
    report.step = static_cast<int64_t>(parsed->GetNumber("step").value_or(0));
    report.finished = parsed->GetString("reason") == "max_steps";
    if (generation == ranks_generation_ && ranks_.count(rank)) ranks_[rank].stopped_record = true;
  } else if (kind == "eval" && rank == 0) {
    if (generation == ranks_generation_) {
      JsonObject record = *parsed;
      record.Erase("event");
      record.SetInt("generation", generation);
      // metrics.jsonl: evaluation records carry eval_loss and eval_<metric>, never "loss".
      JsonObject metrics;
      for (const auto& [key, value] : record.fields()) {
        const bool plain = key == "step" || key == "generation";
        metrics.Set(plain ? key : "eval_" + key, value);
      }
      Warn(journal_->RecordStep(metrics));
      Warn(journal_->RecordEvent("eval", record));
      *out_ << manager::FormatEvalLine(record) << std::endl;
    }
    return;
  } else if (kind == "settings" && rank == 0) {
    const std::string text = parsed->GetString("text").value_or("");
    if (text != settings_) {  // once, and again only when a launch brings other settings
      settings_ = text;
      JsonObject fields = *parsed;  // the worker's own fields pass through
      fields.Erase("event");
      records::Settings known = records::FromJson<records::Settings>(fields);
      known.generation = generation;
      Warn(journal_->RecordEvent(records::Settings::kEvent, records::SetFields(fields, known)));
      *out_ << "mitra: training with " << text << std::endl;
    }
    return;
  } else if (kind == "warning") {
    Warn(journal_->RecordEvent(
        "worker_warning", JsonObject()
                              .SetInt("generation", generation)
                              .SetInt("rank", rank)
                              .SetString("message", parsed->GetString("message").value_or(""))));
    *err_ << "mitra: warning: rank " << rank << ": " << parsed->GetString("message").value_or("")
          << std::endl;
    return;
  } else if (kind == "checkpoint_failed") {
    JsonObject fields = *parsed;
    fields.Erase("event");
    fields.SetInt("generation", generation).SetInt("rank", rank);
    Warn(journal_->RecordEvent(kind, fields));
    *err_ << "mitra: warning: rank " << rank << " could not write its part of the checkpoint of "
          << "step " << static_cast<int64_t>(parsed->GetNumber("step").value_or(0)) << ": "
          << parsed->GetString("error").value_or("") << std::endl;
    return;
  } else if (kind == "checkpoint" || kind == "restored") {
    JsonObject fields = *parsed;  // the worker's own fields pass through
    fields.Erase("event");
    records::Checkpoint known = records::FromJson<records::Checkpoint>(fields);
    known.generation = generation;
    known.rank = rank;
    Warn(journal_->RecordEvent(kind, records::SetFields(fields, known)));
    report.kind = kind == "restored" ? manager::RankReport::Kind::kRestored : manager::RankReport::Kind::kCheckpoint;
    report.step = static_cast<int64_t>(parsed->GetNumber("step").value_or(0));
    report.seconds = parsed->GetNumber("seconds").value_or(0);
  } else {
    return;
  }
  Handle(report);
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
    return;
  }
  Handle(manager::MachinesChanged{*list});
}

// ---- Records -----------------------------------------------------------------------------

void RunLoop::OnRecord(const manager::RecordAction& record) {
  JsonObject fields = record.fields;
  Warn(journal_->RecordEvent(record.event, fields));
  last_event_ = JsonObject().SetString("event", record.event);
  for (const auto& [key, value] : fields.fields()) last_event_.Set(key, value);
  last_event_.SetNumber("time", clock_->WallSeconds());
  if (record.event == "failure") {
    // The failed rank's own words, when it left any.
    const std::optional<double> rank = fields.GetNumber("rank");
    const auto it = rank ? ranks_.find(static_cast<int>(*rank)) : ranks_.end();
    if (it != ranks_.end()) {
      std::vector<std::string> lines;  // heartbeats say nothing about why it failed
      for (const std::string& line : it->second.last_lines) {
        if (!IsHeartbeatRecord(line)) lines.push_back(line);
      }
      *err_ << manager::FormatFailureReport(
                   record.fields.GetString("reason").value_or(""),
                   RunDir::LogName(ranks_generation_, it->first), lines)
            << std::flush;
      return;
    }
  }
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
      final_state_ = records::End::kFailed;
      exit_code_ = kExitFailed;
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
  snapshot.step = controller_.last_step();
  snapshot.max_steps = max_steps_;
  snapshot.last_step = stats_.last();
  JsonObject workers;  // rank -> "address pid": what a restarted manager must clean up
  const std::vector<bool> running = controller_.RunningRanksMask();
  for (const auto& [rank, live] : ranks_) {
    if (live.pid == 0 || rank >= static_cast<int>(running.size()) || !running[rank]) continue;
    snapshot.pids.push_back(live.pid);
    workers.SetString(std::to_string(rank), live.machine + " " + std::to_string(live.pid));
  }
  snapshot.running_workers = static_cast<int>(snapshot.pids.size());
  snapshot.ready_workers = controller_.ReadyRanks();
  snapshot.elapsed_s = now - start_s_;
  snapshot.updated_at = clock_->WallSeconds();
  JsonObject state = manager::StateRecord(options_.state_fields, controller_.plan(),
                                 std::max(first_generation_, controller_.generation()),
                                 snapshot);
  state.SetString("reason", controller_.reason());
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
      m.state = view.state;
      m.used_slots = view.used_slots;
      if (view.state == "failed") m.until = view.retry_at + wall_offset;
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
