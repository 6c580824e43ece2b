#include "manager/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/signal_watcher.h"
#include "common/strings.h"
#include "manager/run_dir.h"
#include "manager/run_records.h"
#include "manager/worker_env.h"

namespace mitra::manager {
namespace {

using launcher::ProcessEvent;

// The loop wakes at least this often even with no deadline near, so that a deadline set by a
// handler is never overslept.
constexpr double kMaxWaitS = 0.25;

std::string Seconds(double s) { return FormatSeconds(std::round(s * 10) / 10) + " s"; }

}  // namespace

Supervisor::Supervisor(Job job, SupervisorOptions options, launcher::ProcessRunner* runner,
                       Clock* clock, RunJournal* journal, EventQueue* queue, std::ostream* out,
                       std::ostream* err)
    : job_(std::move(job)),
      options_(options),
      runner_(runner),
      clock_(clock),
      journal_(journal),
      queue_(queue),
      out_(out),
      err_(err),
      ranks_(job_.plan.world_size()) {}

SupervisorResult Supervisor::Run() {
  start_s_ = clock_->MonotonicSeconds();
  Launch();
  while (live_ > 0) {
    const double now = clock_->MonotonicSeconds();
    OnTimers(now);
    if (abandon_deadline_s_ && now >= *abandon_deadline_s_) break;
    const double wait_s = std::clamp(NextDeadline() - now, 0.0, kMaxWaitS);
    std::optional<Event> event = queue_->PopFor(std::chrono::duration<double>(wait_s));
    if (event) Dispatch(*event);
  }
  return Finish();
}

void Supervisor::Launch() {
  const int world = job_.plan.world_size();
  std::vector<int64_t> pids(world, 0);
  for (int rank = 0; rank < world; ++rank) {
    EventQueue* queue = queue_;
    Result<launcher::StartedProcess> started =
        runner_->Start(job_.specs[rank], [queue, rank](ProcessEvent event) {
          queue->Push(WorkerEvent{rank, std::move(event)});
        });
    if (!started.ok()) {
      *err_ << "mitra: cannot start rank " << rank << ": " << started.status().message() << "\n";
      Fail("rank " + std::to_string(rank) + " could not be started: " + started.status().message());
      break;
    }
    Rank& r = ranks_[rank];
    r.id = started->id;
    r.pid = started->pid;
    r.running = true;
    pids[rank] = r.pid;
    ++live_;
  }
  const JsonObject launch = LaunchRecord(job_.plan, job_.generation,
                                         world > 0 ? job_.specs[0].program : "", pids, Elapsed());
  Record("launch", launch);
  if (!failure_) {
    std::vector<std::string> pid_text;
    for (const int64_t pid : pids) pid_text.push_back(std::to_string(pid));
    *out_ << "mitra: launched " << world << " workers (generation " << job_.generation << "), pids "
          << Join(pid_text, " ") << std::endl;
  }
  WriteState(true);
  if (failure_) BeginTerminate(*failure_);
}

void Supervisor::Dispatch(Event& event) {
  if (auto* worker = std::get_if<WorkerEvent>(&event)) {
    if (worker->rank < 0 || worker->rank >= static_cast<int>(ranks_.size())) return;
    if (worker->event.kind == ProcessEvent::Kind::kMessage) {
      OnMessage(worker->rank, worker->event.message);
    } else {
      OnExit(worker->rank, worker->event);
    }
  } else {
    OnStopRequested(std::get<StopRequested>(event).signal_number);
  }
}

void Supervisor::OnMessage(int rank, const std::string& text) {
  Result<JsonObject> parsed = JsonObject::Parse(text);
  if (!parsed.ok()) {
    Record("bad_message", JsonObject()
                              .SetInt("rank", rank)
                              .SetString("error", parsed.status().message())
                              .SetString("text", text.substr(0, 200)));
    return;
  }
  const std::string kind = parsed->GetString("event").value_or("");
  Rank& r = ranks_[rank];
  if (kind == "ready" && !r.ready) {
    r.ready = true;
    if (++ready_ == static_cast<int>(ranks_.size())) {
      Record("ready", JsonObject().SetNumber("rendezvous_s", RoundedSeconds(Elapsed())));
      *out_ << "mitra: all " << ready_ << " workers ready after " << Seconds(Elapsed())
            << std::endl;
    }
  } else if (kind == "step" && rank == 0) {
    OnStep(*parsed);
  } else if (kind == "stopped") {
    r.stopped = true;
  }
}

void Supervisor::OnStep(const JsonObject& record) {
  const std::optional<StepRecord> step = StepRecord::FromJson(record);
  if (!step) {
    Record("bad_message", JsonObject()
                              .SetInt("rank", 0)
                              .SetString("error", "step record without a valid \"step\"")
                              .SetString("text", record.ToJson().substr(0, 200)));
    return;
  }
  Warn(journal_->RecordStep(MetricsRecord(record, job_.plan, job_.generation)));
  stats_.Add(*step, clock_->MonotonicSeconds());
  last_step_ = step->step;
  *out_ << FormatProgressLine(*step, options_.max_steps, stats_.EtaSeconds(options_.max_steps))
        << std::endl;
  WriteState(false);
}

void Supervisor::OnExit(int rank, const ProcessEvent& event) {
  Rank& r = ranks_[rank];
  if (!r.running) return;
  r.running = false;
  --live_;
  const double now = clock_->MonotonicSeconds();
  const JsonObject fields = WorkerExitRecord(rank, r.pid, event.exit, r.stopped, Elapsed());
  Record("worker_exit", fields);

  if (event.exit.ok()) {
    // A clean exit while the job runs: the others should be finishing too.
    if (phase_ == Phase::kRunning && live_ > 0 && !finish_deadline_s_) {
      finish_deadline_s_ = now + options_.finish_timeout_s;
    }
    return;
  }
  const std::string log = RunDir::LogName(job_.generation, rank);
  if (phase_ == Phase::kTerminating) {
    // Usually our own SIGTERM/SIGKILL. Anything else is a rank that failed on its own at about
    // the same time (often a peer of the first failure): say so briefly; the first one is the
    // failure reported.
    if (event.exit.signal != SIGTERM && event.exit.signal != SIGKILL) {
      *err_ << "mitra: rank " << rank << " (pid " << r.pid << ") " << event.exit.ToString()
            << " as well; see " << log << std::endl;
    }
    return;
  }

  std::string reason = "rank " + std::to_string(rank) + " (pid " + std::to_string(r.pid) + ") " +
                       event.exit.ToString();
  if (last_step_ > 0) reason += " after step " + std::to_string(last_step_);
  if (event.exit.signal == SIGUSR1) {
    reason += " (it had no SIGUSR1 handler: a worker must install one before it reports ready)";
  }
  *err_ << FormatFailureReport(reason, log, event.last_lines) << std::flush;
  Record("failure", JsonObject(fields)
                        .SetString("reason", reason)
                        .SetString("log", log)
                        .Set("last_lines", JsonValue::StringArray(event.last_lines)));
  Fail(reason + "; see " + log);
  BeginTerminate(reason);
}

void Supervisor::OnStopRequested(int signal_number) {
  const std::string name = SignalName(signal_number);
  const double now = clock_->MonotonicSeconds();
  Record("signal", JsonObject().SetString("signal", name).SetString("state", PhaseName()));
  switch (phase_) {
    case Phase::kRunning:
      if (ready_ < static_cast<int>(ranks_.size())) {
        // A worker installs its SIGUSR1 handler before it reports ready; before that SIGUSR1
        // would kill it. Nothing has been trained yet, so stopping = terminating.
        user_stop_ = true;
        *out_ << "mitra: " << name << " before all workers were ready: stopping them" << std::endl;
        Record("stop", JsonObject()
                           .SetString("reason", name)
                           .SetInt("step", last_step_)
                           .SetInt("ready_workers", ready_));
        BeginTerminate(name + " before all workers were ready");
        break;
      }
      phase_ = Phase::kStopping;
      user_stop_ = true;
      stop_deadline_s_ = now + options_.stop_timeout_s;
      *out_ << "mitra: " << name << ": asking " << live_
            << " workers to stop after the current step (" << name << " again kills them)"
            << std::endl;
      Record("stop", JsonObject()
                         .SetString("reason", name)
                         .SetInt("step", last_step_)
                         .Set("pids", JsonValue::IntArray(RunningPids()))
                         .SetNumber("timeout_s", options_.stop_timeout_s));
      SignalRunning(SIGUSR1);
      WriteState(true);
      break;
    case Phase::kStopping:
      *err_ << "mitra: second " << name << ": killing the workers" << std::endl;
      Fail("the workers were killed on a second " + name + " before they stopped");
      BeginTerminate("second " + name);
      break;
    case Phase::kTerminating:
      if (kill_deadline_s_) kill_deadline_s_ = now;  // impatient: SIGKILL now
      break;
  }
}

void Supervisor::OnTimers(double now) {
  if (phase_ == Phase::kStopping && stop_deadline_s_ && now >= *stop_deadline_s_) {
    const std::string reason = "the workers did not stop within " +
                               Seconds(options_.stop_timeout_s) + " of SIGUSR1 (--stop-timeout)";
    *err_ << "mitra: " << reason << std::endl;
    Fail(reason);
    BeginTerminate(reason);
  }
  if (phase_ == Phase::kRunning && finish_deadline_s_ && now >= *finish_deadline_s_) {
    std::vector<std::string> running;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running) running.push_back(std::to_string(i));
    }
    const std::string reason = "rank(s) " + Join(running, ", ") + " still running " +
                               Seconds(options_.finish_timeout_s) +
                               " after other ranks exited normally";
    *err_ << "mitra: " << reason << std::endl;
    Fail(reason);
    BeginTerminate(reason);
  }
  if (phase_ == Phase::kTerminating && kill_deadline_s_ && now >= *kill_deadline_s_) {
    kill_deadline_s_.reset();
    if (live_ > 0) {
      Record("kill", JsonObject().Set("pids", JsonValue::IntArray(RunningPids())));
      SignalRunning(SIGKILL);
      abandon_deadline_s_ = now + options_.abandon_s;
    }
  }
}

void Supervisor::Fail(const std::string& reason) {
  if (!failure_) failure_ = reason;
}

void Supervisor::BeginTerminate(const std::string& why) {
  if (phase_ == Phase::kTerminating) return;
  phase_ = Phase::kTerminating;
  stop_deadline_s_.reset();
  finish_deadline_s_.reset();
  kill_deadline_s_ = clock_->MonotonicSeconds() + options_.kill_grace_s;
  if (live_ > 0) {
    *err_ << "mitra: stopping " << live_ << " worker(s): SIGTERM, then SIGKILL after "
          << Seconds(options_.kill_grace_s) << std::endl;
    Record("terminate", JsonObject()
                            .SetString("reason", why)
                            .Set("pids", JsonValue::IntArray(RunningPids()))
                            .SetNumber("grace_s", options_.kill_grace_s));
    SignalRunning(SIGTERM);
  }
  WriteState(true);
}

void Supervisor::SignalRunning(int signal_number) {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].running) continue;
    const Status s = runner_->Signal(ranks_[i].id, signal_number);
    if (!s.ok()) *err_ << "mitra: warning: rank " << i << ": " << s.message() << std::endl;
  }
}

double Supervisor::NextDeadline() const {
  double next = std::numeric_limits<double>::infinity();
  for (const auto& deadline :
       {stop_deadline_s_, finish_deadline_s_, kill_deadline_s_, abandon_deadline_s_}) {
    if (deadline) next = std::min(next, *deadline);
  }
  return next;
}

SupervisorResult Supervisor::Finish() {
  if (live_ > 0) {
    const std::string reason = std::to_string(live_) + " worker(s) did not exit " +
                               Seconds(options_.abandon_s) + " after SIGKILL";
    *err_ << "mitra: " << reason << std::endl;
    Fail(reason);
  }
  SupervisorResult result;
  result.last_step = last_step_;
  if (failure_) {
    result.outcome = SupervisorResult::Outcome::kFailed;
    result.reason = *failure_;
    final_state_ = "failed";
  } else if (user_stop_) {
    result.outcome = SupervisorResult::Outcome::kStopped;
    final_state_ = "stopped";
  } else {
    result.outcome = SupervisorResult::Outcome::kDone;
    final_state_ = "done";
  }
  const double wall_s = Elapsed();  // before the records: their writing is not the job's
  JsonObject fields;
  fields.SetInt("step", last_step_).SetNumber("wall_s", RoundedSeconds(wall_s));
  if (stats_.last()) {
    fields.SetNumber("loss", stats_.last()->loss)
        .SetNumber("mean_tokens_per_s", stats_.MeanTokensPerSecond());
  }
  if (failure_) fields.SetString("reason", *failure_);
  Record(final_state_, fields);
  WriteState(true);

  const std::string summary = FormatSummary(last_step_, wall_s, stats_);
  switch (result.outcome) {
    case SupervisorResult::Outcome::kDone:
      *out_ << "mitra: done: " << summary << std::endl;
      break;
    case SupervisorResult::Outcome::kStopped:
      *out_ << "mitra: stopped at step " << last_step_ << " on request: " << summary << std::endl;
      break;
    case SupervisorResult::Outcome::kFailed:
      *err_ << "mitra: failed: " << result.reason << " (" << summary << ")" << std::endl;
      break;
  }
  return result;
}

std::vector<int64_t> Supervisor::RunningPids() const {
  std::vector<int64_t> pids;
  for (const Rank& r : ranks_) {
    if (r.running) pids.push_back(r.pid);
  }
  return pids;
}

void Supervisor::Record(const std::string& event, const JsonObject& fields) {
  Warn(journal_->RecordEvent(event, fields));
}

void Supervisor::Warn(const Status& status) {
  if (status.ok() || journal_warned_) return;
  journal_warned_ = true;
  *err_ << "mitra: warning: cannot write the run directory: " << status.message()
        << "; training goes on" << std::endl;
}

void Supervisor::WriteState(bool force) {
  const double now = clock_->MonotonicSeconds();
  if (!force && now - last_state_write_s_ < options_.state_interval_s) return;
  last_state_write_s_ = now;
  StateSnapshot snapshot;
  snapshot.state = PhaseName();
  snapshot.step = last_step_;
  snapshot.max_steps = options_.max_steps;
  snapshot.last_step = stats_.last();
  snapshot.ready_workers = ready_;
  snapshot.running_workers = live_;
  snapshot.pids = RunningPids();
  snapshot.elapsed_s = Elapsed();
  snapshot.updated_at = clock_->WallSeconds();
  Warn(journal_->WriteState(StateRecord(job_.state_fields, job_.plan, job_.generation, snapshot)));
}

std::string Supervisor::PhaseName() const {
  if (!final_state_.empty()) return final_state_;
  switch (phase_) {
    case Phase::kRunning:
      return "running";
    case Phase::kStopping:
      return "stopping";
    case Phase::kTerminating:
      return "terminating";
  }
  return "unknown";
}

}  // namespace mitra::manager
