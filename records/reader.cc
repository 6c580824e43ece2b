#include "records/reader.h"

#include "common/strings.h"

namespace mitra::records {

std::vector<std::string> CompleteLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t end = text.find('\n'); end != std::string::npos; end = text.find('\n', begin)) {
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

RunDirReader::RunDirReader(FileSystem* fs, std::string run_dir)
    : fs_(fs), run_dir_(std::move(run_dir)) {}

JsonLines RunDirReader::Read(const char* file) const {
  JsonLines out;
  Result<std::string> text = fs_->ReadFile(JoinPath(run_dir_, file));
  if (!text.ok()) return out;
  for (const std::string& line : CompleteLines(*text)) {
    if (Trim(line).empty()) continue;
    Result<JsonObject> record = JsonObject::Parse(line);
    if (!record.ok()) {
      ++out.skipped;
      continue;
    }
    out.records.push_back(std::move(record).value());
  }
  return out;
}

std::vector<EventRecord> RunDirReader::Events(int* skipped) const {
  JsonLines lines = Read(kEventsFile);
  if (skipped != nullptr) *skipped += lines.skipped;
  std::vector<EventRecord> events;
  events.reserve(lines.records.size());
  for (JsonObject& fields : lines.records) {
    EventRecord e;
    e.time = fields.GetNumber("time").value_or(0);
    e.event = fields.GetString("event").value_or("");
    e.fields = std::move(fields);
    events.push_back(std::move(e));
  }
  return events;
}

JsonLines RunDirReader::Metrics() const { return Read(kMetricsFile); }

std::vector<RankSteps> RunDirReader::RankStepRecords(int* skipped) const {
  JsonLines lines = Read(kRankStepsFile);
  if (skipped != nullptr) *skipped += lines.skipped;
  std::vector<RankSteps> out;
  out.reserve(lines.records.size());
  for (const JsonObject& r : lines.records) out.push_back(FromJson<RankSteps>(r));
  return out;
}

std::optional<JsonObject> RunDirReader::StateJson() const {
  Result<std::string> text = fs_->ReadFile(JoinPath(run_dir_, kStateFile));
  if (!text.ok()) return std::nullopt;
  Result<JsonObject> state = JsonObject::Parse(*text);
  if (!state.ok()) return std::nullopt;
  return std::move(state).value();
}

std::optional<State> RunDirReader::ReadState() const {
  std::optional<JsonObject> json = StateJson();
  if (!json) return std::nullopt;
  return FromJson<State>(*json);
}

std::optional<contract::TracedStep> RunDirReader::StepTrace(int64_t generation, int rank) const {
  Result<std::string> text = fs_->ReadFile(JoinPath(run_dir_, StepTraceFile(generation, rank)));
  if (!text.ok()) return std::nullopt;
  return contract::ParseStepTrace(*text);
}

bool RunDirReader::HasRecords() const {
  return fs_->Exists(JoinPath(run_dir_, kEventsFile)) ||
         fs_->Exists(JoinPath(run_dir_, kMetricsFile));
}

}  // namespace mitra::records
