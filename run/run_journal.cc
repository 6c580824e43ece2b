#include "run/run_journal.h"

namespace mitra::run {

Result<std::unique_ptr<RunJournal>> RunJournal::Open(FileSystem* fs, Clock* clock,
                                                     const RunDir& dir,
                                                     RunObserver* observer) {
  Result<std::unique_ptr<AppendableFile>> events = fs->OpenForAppend(dir.EventsPath());
  if (!events.ok()) return events.status();
  Result<std::unique_ptr<AppendableFile>> metrics = fs->OpenForAppend(dir.MetricsPath());
  if (!metrics.ok()) return metrics.status();
  return std::unique_ptr<RunJournal>(new RunJournal(
      fs, clock, dir, std::move(events).value(), std::move(metrics).value(), observer));
}

RunJournal::RunJournal(FileSystem* fs, Clock* clock, const RunDir& dir,
                       std::unique_ptr<AppendableFile> events,
                       std::unique_ptr<AppendableFile> metrics, RunObserver* observer)
    : fs_(fs),
      clock_(clock),
      state_path_(dir.StatePath()),
      rank_steps_path_(dir.RankStepsPath()),
      events_(std::move(events)),
      metrics_(std::move(metrics)),
      observer_(observer) {}

Status RunJournal::RecordEvent(const std::string& name, const JsonObject& fields) {
  JsonObject record;
  record.SetNumber("time", clock_->WallSeconds());
  record.SetString("event", name);
  for (const auto& [key, value] : fields.fields()) record.Set(key, value);
  if (observer_ != nullptr) observer_->OnEvent(record);
  return events_->Append(record.ToJson() + "\n");
}

Status RunJournal::RecordStep(const JsonObject& step_record) {
  JsonObject record = step_record;
  record.Erase("event");
  record.SetNumber("time", clock_->WallSeconds());
  if (observer_ != nullptr) observer_->OnStep(record);
  return metrics_->Append(record.ToJson() + "\n");
}

Status RunJournal::RecordRankSteps(records::RankSteps times) {
  if (!rank_steps_) {
    Result<std::unique_ptr<AppendableFile>> file = fs_->OpenForAppend(rank_steps_path_);
    if (!file.ok()) return file.status();
    rank_steps_ = std::move(file).value();
  }
  times.time = clock_->WallSeconds();
  return rank_steps_->Append(records::ToJson(times).ToJson() + "\n");
}

Status RunJournal::WriteState(const JsonObject& state) {
  if (observer_ != nullptr) observer_->OnState(state);
  std::string text = "{\n";
  const auto& fields = state.fields();
  for (size_t i = 0; i < fields.size(); ++i) {
    text += "  " + JsonQuote(fields[i].first) + ": " + fields[i].second.ToJson();
    text += i + 1 < fields.size() ? ",\n" : "\n";
  }
  text += "}\n";
  return fs_->WriteFileAtomically(state_path_, text);
}

}  // namespace mitra::run
