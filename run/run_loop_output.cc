// The run loop's reading of what workers print: their `@mitra` records turned into the
// controller's inputs, records and terminal lines, and their exits; and, when one fails, its
// own last words. One class with run_loop.cc.
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "common/strings.h"
#include "contract/worker_messages.h"
#include "manager/failure_excerpt.h"
#include "manager/progress.h"
#include "manager/run_records.h"
#include "records/records.h"
#include "run/run_loop.h"

namespace mitra::run {
void RunLoop::OnWorkerEvent(WorkerEvent& event) {
  const WorkerProcesses::Key key{event.runner, event.event.id};
  std::tie(event.generation, event.rank) =
      processes_.Route(key, {event.generation, event.rank});  // a kept worker's new place
  if (event.event.kind == launcher::ProcessEvent::Kind::kExited) processes_.Exited(key);
  if (event.event.kind == launcher::ProcessEvent::Kind::kMessage) {
    OnMessage(event.generation, event.rank, event.event.message);
    return;
  }
  manager::RankExited exited{
      event.generation, event.rank, event.event.exit,
      manager::ExcerptOf(std::move(event.event.earlier_errors), event.event.last_lines)};
  if (LiveRank* live = processes_.Find(event.generation, event.rank)) {
    live->output = exited.output;
    Warn(journal_->RecordEvent(
        "worker_exit",
        manager::WorkerExitRecord(event.rank, static_cast<int>(live->pid), event.event.exit,
                                  live->stopped_record,
                                  clock_->MonotonicSeconds() - live->launched_s)
            .SetInt("generation", event.generation)
            .SetString("machine", live->machine)
            .SetBool("lost", event.event.exit.lost)));
  }
  Handle(exited);
}

void RunLoop::OnMessage(int64_t generation, int rank, const std::string& text) {
  Result<contract::ReadMessage> read = contract::ParseWorkerMessage(text);
  if (!read.ok()) {
    Warn(journal_->RecordEvent("bad_message", JsonObject()
                                                  .SetInt("rank", rank)
                                                  .SetString("error", read.status().message())
                                                  .SetString("text", text.substr(0, 200))));
    return;
  }
  const From from{generation, rank, generation == processes_.generation()};
  std::visit([&](const auto& message) { Receive(from, message, read->more); }, read->message);
}

manager::RankReport RunLoop::ReportOf(const From& from, manager::RankReport::Kind kind,
                                      int64_t step) {
  return manager::RankReport{from.generation, from.rank, kind, step};
}

void RunLoop::Receive(const From& from, const contract::message::Starting&, const JsonObject&) {
  Handle(ReportOf(from, manager::RankReport::Kind::kStarting, 0));
}

void RunLoop::Receive(const From& from, const contract::message::Ready& ready, const JsonObject&) {
  manager::RankReport report = ReportOf(from, manager::RankReport::Kind::kReady, 0);
  report.can_park = ready.park;
  report.can_hold = ready.Holds();
  Handle(report);
}

void RunLoop::Receive(const From& from, const contract::message::Parked& parked,
                      const JsonObject&) {
  manager::RankReport report = ReportOf(from, manager::RankReport::Kind::kParked, parked.step);
  if (parked.held_step) {
    report.held.step = *parked.held_step;
    report.held.first = static_cast<int>(parked.held_first_segment.value_or(0));
    report.held.end = static_cast<int>(parked.held_end_segment.value_or(0));
  }
  if (from.current) processes_.Parked(from.rank);
  Handle(report);
}

void RunLoop::Receive(const From& from, const contract::message::Heartbeat& beat,
                      const JsonObject&) {
  if (beat.steps) OnStepTimes(from, beat);
  manager::RankReport report = ReportOf(from, manager::RankReport::Kind::kHeartbeat, 0);
  if (beat.steps.value_or(0) > 0) report.compute_s = beat.compute_s.value_or(-1);
  Handle(report);
}

void RunLoop::Receive(const From& from, const contract::message::Step& step,
                      const JsonObject& more) {
  if (from.rank != 0) return;  // only rank 0 reports steps
  const manager::StepRecord trained = manager::StepRecord::Of(step);
  if (from.current) {
    Warn(journal_->RecordStep(
        manager::MetricsRecord(step, more, controller_.plan(), from.generation)));
    stats_.Add(trained, clock_->MonotonicSeconds());
    *out_ << manager::FormatProgressLine(trained, max_steps_, stats_.EtaSeconds(max_steps_))
          << std::endl;
  }
  manager::RankReport report = ReportOf(from, manager::RankReport::Kind::kStep, step.step);
  report.seconds = step.step_time_s;
  Handle(report);
}

void RunLoop::Receive(const From& from, const contract::message::Stopped& stopped,
                      const JsonObject&) {
  manager::RankReport report = ReportOf(from, manager::RankReport::Kind::kStopped, stopped.step);
  report.finished = stopped.reason == contract::message::Stopped::kMaxSteps;
  if (LiveRank* live = processes_.Find(from.generation, from.rank)) live->stopped_record = true;
  Handle(report);
}

void RunLoop::RecordCheckpointEvent(const From& from, const char* event, JsonObject fields) {
  records::Checkpoint known = records::FromJson<records::Checkpoint>(fields);
  known.generation = from.generation;
  known.rank = from.rank;
  Warn(journal_->RecordEvent(event, records::SetFields(fields, known)));
}

void RunLoop::Receive(const From& from, const contract::message::Checkpoint& done,
                      const JsonObject& more) {
  RecordCheckpointEvent(from, records::Checkpoint::kEvent, contract::MessageFields(done, more));
  Handle(ReportOf(from, manager::RankReport::Kind::kCheckpoint, done.step));
}

void RunLoop::Receive(const From& from, const contract::message::Restored& restored,
                      const JsonObject& more) {
  RecordCheckpointEvent(from, records::Checkpoint::kRestoredEvent,
                        contract::MessageFields(restored, more));
  manager::RankReport report =
      ReportOf(from, manager::RankReport::Kind::kRestored, restored.step);
  report.seconds = restored.seconds;
  if (restored.kept) {
    manager::StateSources sources;
    sources.kept = static_cast<int>(*restored.kept);
    sources.peer = static_cast<int>(restored.peer.value_or(0));
    sources.checkpoint = static_cast<int>(restored.from_checkpoint.value_or(0));
    sources.peer_bytes = restored.peer_bytes.value_or(0);
    sources.peer_bytes_per_s = restored.peer_bytes_per_s.value_or(0);
    report.sources = sources;
  }
  Handle(report);
}

void RunLoop::Receive(const From& from, const contract::message::Eval& eval,
                      const JsonObject& more) {
  if (from.rank != 0 || !from.current) return;
  JsonObject fields = contract::MessageFields(eval, more);
  fields.SetInt("generation", from.generation);
  // metrics.jsonl: evaluation records carry eval_loss and eval_<metric>, never "loss".
  JsonObject metrics;
  for (const auto& [key, value] : fields.fields()) {
    const bool plain = key == "step" || key == "generation";
    metrics.Set(plain ? key : records::EvalMetrics::kPrefix + key, value);
  }
  Warn(journal_->RecordStep(metrics));
  Warn(journal_->RecordEvent(contract::message::Eval::kEvent, fields));
  *out_ << manager::FormatEvalLine(eval, more) << std::endl;
}

void RunLoop::Receive(const From& from, const contract::message::Settings& settings,
                      const JsonObject& more) {
  if (from.rank != 0) return;
  if (settings.text == settings_) return;  // once, and again only when a launch brings others
  settings_ = settings.text;
  JsonObject fields = contract::MessageFields(settings, more);  // the worker's own pass through
  records::Settings known = records::FromJson<records::Settings>(fields);
  known.generation = from.generation;
  Warn(journal_->RecordEvent(records::Settings::kEvent, records::SetFields(fields, known)));
  *out_ << "mitra: training with " << settings.text << std::endl;
}

void RunLoop::Receive(const From& from, const contract::message::Warning& warning,
                      const JsonObject&) {
  Warn(journal_->RecordEvent("worker_warning", JsonObject()
                                                   .SetInt("generation", from.generation)
                                                   .SetInt("rank", from.rank)
                                                   .SetString("message", warning.message)));
  *err_ << "mitra: warning: rank " << from.rank << ": " << warning.message << std::endl;
}

void RunLoop::Receive(const From& from, const contract::message::SettingsReplaced& replaced,
                      const JsonObject&) {
  // Once per job: every new process of rank 0 says it again.
  if (from.rank != 0 || !settings_replaced_.insert(replaced.message).second) return;
  Warn(journal_->RecordEvent(contract::message::SettingsReplaced::kEvent,
                             JsonObject()
                                 .SetInt("generation", from.generation)
                                 .SetString("message", replaced.message)));
  *out_ << "mitra: " << replaced.message << std::endl;
}

void RunLoop::Receive(const From& from, const contract::message::CheckpointFailed& failed,
                      const JsonObject& more) {
  JsonObject fields = contract::MessageFields(failed, more);
  fields.SetInt("generation", from.generation).SetInt("rank", from.rank);
  Warn(journal_->RecordEvent(contract::message::CheckpointFailed::kEvent, fields));
  *err_ << "mitra: warning: rank " << from.rank << " could not write its part of the checkpoint "
        << "of step " << failed.step << ": " << failed.error << std::endl;
}

bool RunLoop::ReportFailure(const JsonObject& failure) {
  const std::optional<double> rank = failure.GetNumber("rank");
  const int64_t generation = processes_.generation();
  const LiveRank* live = rank ? processes_.Find(generation, static_cast<int>(*rank)) : nullptr;
  if (live == nullptr) return false;
  const manager::FailureExcerpt& output = live->output;
  const std::string key = output.ErrorLines().empty() ? "" : output.Key();
  *err_ << manager::FormatFailureReport(failure.GetString("reason").value_or(""),
                                        RunDir::LogName(generation, static_cast<int>(*rank)), output,
                                        !key.empty() && key == last_failure_key_)
        << std::flush;
  last_failure_key_ = key;
  return true;
}

}  // namespace mitra::run
