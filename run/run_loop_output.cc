// The run loop's reading of what workers print: their `@mitra` records turned into the
// controller's inputs, records and terminal lines, and their exits; and, when one fails, its
// own last words. One class with run_loop.cc.
#include <string>
#include <tuple>
#include <vector>

#include "common/strings.h"
#include "manager/failure_excerpt.h"
#include "manager/progress.h"
#include "manager/run_records.h"
#include "records/records.h"
#include "run/run_loop.h"

namespace mitra::run {
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
  manager::RankExited exited{
      event.generation, event.rank, event.event.exit,
      manager::ExcerptOf(std::move(event.event.earlier_errors), event.event.last_lines)};
  if (event.generation == ranks_generation_) {
    const auto it = ranks_.find(event.rank);
    if (it != ranks_.end()) {
      it->second.output = exited.output;
      Warn(journal_->RecordEvent(
          "worker_exit",
          manager::WorkerExitRecord(event.rank, static_cast<int>(it->second.pid), event.event.exit,
                           it->second.stopped_record,
                           clock_->MonotonicSeconds() - it->second.launched_s)
              .SetInt("generation", event.generation)
              .SetString("machine", it->second.machine)
              .SetBool("lost", event.event.exit.lost)));
    }
  }
  Handle(exited);
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
  if (std::optional<manager::RankReport> report = ReadReport(generation, rank, kind, *parsed)) {
    Handle(*report);
  } else {
    OnWorkerNote(generation, rank, kind, *parsed);
  }
}

std::optional<manager::RankReport> RunLoop::ReadReport(int64_t generation, int rank,
                                                       const std::string& kind,
                                                       const JsonObject& record) {
  using Kind = manager::RankReport::Kind;
  const bool current = generation == ranks_generation_;
  manager::RankReport report{generation, rank, Kind::kHeartbeat, 0};
  const int64_t step = static_cast<int64_t>(record.GetNumber("step").value_or(0));
  if (kind == "starting") {
    report.kind = Kind::kStarting;
  } else if (kind == "ready") {
    report.kind = Kind::kReady;
    report.can_park = record.Find("park") != nullptr && record.Find("park")->bool_value();
    report.can_hold = record.Find("hold") == nullptr || record.Find("hold")->bool_value();
  } else if (kind == "parked") {
    report.kind = Kind::kParked;
    report.step = step;
    if (const std::optional<double> held = record.GetNumber("held_step")) {
      report.held.step = static_cast<int64_t>(*held);
      report.held.first = static_cast<int>(record.GetNumber("held_first_segment").value_or(0));
      report.held.end = static_cast<int>(record.GetNumber("held_end_segment").value_or(0));
    }
    if (const auto it = ranks_.find(rank); current && it != ranks_.end() && it->second.runner) {
      parked_[{generation, rank}] = it->second;
    }
  } else if (kind == "heartbeat") {
    report.kind = Kind::kHeartbeat;
    if (record.Find("steps") != nullptr) OnStepTimes(generation, rank, record);
  } else if (kind == "step" && rank == 0) {
    const std::optional<manager::StepRecord> trained = manager::StepRecord::FromJson(record);
    if (!trained) return std::nullopt;
    if (current) {
      Warn(journal_->RecordStep(manager::MetricsRecord(record, controller_.plan(), generation)));
      stats_.Add(*trained, clock_->MonotonicSeconds());
      *out_ << manager::FormatProgressLine(*trained, max_steps_, stats_.EtaSeconds(max_steps_))
            << std::endl;
    }
    report.kind = Kind::kStep;
    report.step = trained->step;
    report.seconds = trained->step_time_s;
  } else if (kind == "stopped") {
    report.kind = Kind::kStopped;
    report.step = step;
    report.finished = record.GetString("reason") == "max_steps";
    if (current && ranks_.count(rank)) ranks_[rank].stopped_record = true;
  } else if (kind == records::Checkpoint::kEvent || kind == records::Checkpoint::kRestoredEvent) {
    JsonObject fields = record;  // the worker's own fields pass through
    fields.Erase("event");
    records::Checkpoint known = records::FromJson<records::Checkpoint>(fields);
    known.generation = generation;
    known.rank = rank;
    Warn(journal_->RecordEvent(kind, records::SetFields(fields, known)));
    report.kind = kind == "restored" ? Kind::kRestored : Kind::kCheckpoint;
    report.step = step;
    report.seconds = record.GetNumber("seconds").value_or(0);
    if (record.Find("kept") != nullptr) {
      manager::StateSources sources;
      sources.kept = static_cast<int>(record.GetNumber("kept").value_or(0));
      sources.peer = static_cast<int>(record.GetNumber("peer").value_or(0));
      sources.checkpoint = static_cast<int>(record.GetNumber("from_checkpoint").value_or(0));
      sources.peer_bytes = static_cast<int64_t>(record.GetNumber("peer_bytes").value_or(0));
      sources.peer_bytes_per_s = record.GetNumber("peer_bytes_per_s").value_or(0);
      report.sources = sources;
    }
  } else {
    return std::nullopt;
  }
  return report;
}

void RunLoop::OnWorkerNote(int64_t generation, int rank, const std::string& kind,
                           const JsonObject& record) {
  if (kind == "eval" && rank == 0) {
    if (generation != ranks_generation_) return;
    JsonObject fields = record;
    fields.Erase("event");
    fields.SetInt("generation", generation);
    // metrics.jsonl: evaluation records carry eval_loss and eval_<metric>, never "loss".
    JsonObject metrics;
    for (const auto& [key, value] : fields.fields()) {
      const bool plain = key == "step" || key == "generation";
      metrics.Set(plain ? key : "eval_" + key, value);
    }
    Warn(journal_->RecordStep(metrics));
    Warn(journal_->RecordEvent("eval", fields));
    *out_ << manager::FormatEvalLine(fields) << std::endl;
  } else if (kind == "settings" && rank == 0) {
    const std::string text = record.GetString("text").value_or("");
    if (text == settings_) return;  // once, and again only when a launch brings other settings
    settings_ = text;
    JsonObject fields = record;  // the worker's own fields pass through
    fields.Erase("event");
    records::Settings known = records::FromJson<records::Settings>(fields);
    known.generation = generation;
    Warn(journal_->RecordEvent(records::Settings::kEvent, records::SetFields(fields, known)));
    *out_ << "mitra: training with " << text << std::endl;
  } else if (kind == "warning") {
    const std::string message = record.GetString("message").value_or("");
    Warn(journal_->RecordEvent("worker_warning", JsonObject()
                                                     .SetInt("generation", generation)
                                                     .SetInt("rank", rank)
                                                     .SetString("message", message)));
    *err_ << "mitra: warning: rank " << rank << ": " << message << std::endl;
  } else if (kind == "settings_replaced" && rank == 0) {
    // Once per job: every new process of rank 0 says it again.
    const std::string message = record.GetString("message").value_or("");
    if (settings_replaced_.insert(message).second) {
      Warn(journal_->RecordEvent(kind, JsonObject()
                                           .SetInt("generation", generation)
                                           .SetString("message", message)));
      *out_ << "mitra: " << message << std::endl;
    }
  } else if (kind == "checkpoint_failed") {
    JsonObject fields = record;
    fields.Erase("event");
    fields.SetInt("generation", generation).SetInt("rank", rank);
    Warn(journal_->RecordEvent(kind, fields));
    *err_ << "mitra: warning: rank " << rank << " could not write its part of the checkpoint of "
          << "step " << static_cast<int64_t>(record.GetNumber("step").value_or(0)) << ": "
          << record.GetString("error").value_or("") << std::endl;
  }
}

bool RunLoop::ReportFailure(const JsonObject& failure) {
  const std::optional<double> rank = failure.GetNumber("rank");
  const auto it = rank ? ranks_.find(static_cast<int>(*rank)) : ranks_.end();
  if (it == ranks_.end()) return false;
  const manager::FailureExcerpt& output = it->second.output;
  const std::string key = output.ErrorLines().empty() ? "" : output.Key();
  *err_ << manager::FormatFailureReport(failure.GetString("reason").value_or(""),
                                        RunDir::LogName(ranks_generation_, it->first), output,
                                        !key.empty() && key == last_failure_key_)
        << std::flush;
  last_failure_key_ = key;
  return true;
}

}  // namespace mitra::run
