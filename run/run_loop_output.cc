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
                           it->second.stopped_record, clock_->MonotonicSeconds() - start_s_)
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
      JsonObject fields = *parsed;
      fields.Erase("event");
      fields.SetInt("generation", generation);
      Warn(journal_->RecordEvent("settings", fields));
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
    JsonObject fields = *parsed;
    fields.Erase("event");
    fields.SetInt("generation", generation).SetInt("rank", rank);
    Warn(journal_->RecordEvent(kind, fields));
    report.kind = kind == "restored" ? manager::RankReport::Kind::kRestored : manager::RankReport::Kind::kCheckpoint;
    report.step = static_cast<int64_t>(parsed->GetNumber("step").value_or(0));
    report.seconds = parsed->GetNumber("seconds").value_or(0);
  } else {
    return;
  }
  Handle(report);
}

bool RunLoop::ReportFailure(const JsonObject& failure) {
  const std::optional<double> rank = failure.GetNumber("rank");
  const auto it = rank ? ranks_.find(static_cast<int>(*rank)) : ranks_.end();
  if (it == ranks_.end()) return false;
  *err_ << manager::FormatFailureReport(failure.GetString("reason").value_or(""),
                                        RunDir::LogName(ranks_generation_, it->first),
                                        it->second.output)
        << std::flush;
  return true;
}

}  // namespace mitra::run
