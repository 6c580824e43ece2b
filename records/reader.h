// Reading a run directory's records (records.h) through the FileSystem seam: the reader of
// `mitra status` (state.json when no manager answers), `mitra report` and `mitra plan
// --validate`, step traces included.
//
// A run directory may be read while its manager writes it, or after a crash cut a record: the
// last line without its newline is being written and is left out, and a line that is not one
// JSON object is counted as skipped, never an error. A missing file holds no records.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/json.h"
#include "records/records.h"
#include "contract/step_trace.h"

namespace mitra::records {

// One events.jsonl record: its time and event, and all its fields (those two included).
struct EventRecord {
  double time = 0;
  std::string event;
  JsonObject fields;

  template <class Record>
  bool Is() const { return event == Record::kEvent; }
  template <class Record>
  Record As() const { return FromJson<Record>(fields); }
};

// The objects of a .jsonl file, in order.
struct JsonLines {
  std::vector<JsonObject> records;
  int skipped = 0;  // lines that were not one JSON object
};

// The complete lines of `text`: a last line without '\n' is being written and is left out.
std::vector<std::string> CompleteLines(const std::string& text);

// Not thread-safe; `fs` must outlive the reader. Each call reads its file afresh.
class RunDirReader {
 public:
  RunDirReader(FileSystem* fs, std::string run_dir);

  const std::string& run_dir() const { return run_dir_; }

  std::vector<EventRecord> Events(int* skipped = nullptr) const;    // events.jsonl
  JsonLines Metrics() const;                                          // metrics.jsonl
  std::vector<RankSteps> RankStepRecords(int* skipped = nullptr) const;  // rank_steps.jsonl
  // state.json; nullopt when it is missing or not one JSON object (being replaced, damaged).
  std::optional<JsonObject> StateJson() const;
  std::optional<State> ReadState() const;
  // logs/gen-G/rank-R.trace.json; nullopt when the rank wrote none (only local workers do) or
  // it is not a trace.
  std::optional<contract::TracedStep> StepTrace(int64_t generation, int rank) const;

  // Whether the directory holds events.jsonl or metrics.jsonl: a run directory at all.
  bool HasRecords() const;

 private:
  JsonLines Read(const char* file) const;

  FileSystem* fs_;
  std::string run_dir_;
};

}  // namespace mitra::records
