// RunJournal: the run directory's records (events.jsonl, metrics.jsonl, rank_steps.jsonl,
// state.json).
//
// Every record is one JSON object on one line, written with a single append so that a reader
// tailing the file never sees half a record. state.json is replaced atomically.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/file_system.h"
#include "common/json.h"
#include "records/records.h"
#include "run/run_dir.h"
#include "run/run_observer.h"

namespace mitra::run {

// Not thread-safe: the manager's loop is its only user.
class RunJournal {
 public:
  // Opens (creating) events.jsonl and metrics.jsonl in `dir`, which must exist. `fs` and
  // `clock` must outlive the journal, and so must `observer` (may be null), which is told every
  // record as written, even one the disk refused.
  static Result<std::unique_ptr<RunJournal>> Open(FileSystem* fs, Clock* clock, const RunDir& dir,
                                                  RunObserver* observer = nullptr);

  // Appends {"time":T,"event":NAME,...fields} to events.jsonl (T: Unix seconds).
  Status RecordEvent(const std::string& name, const JsonObject& fields);
  // Appends a worker's step record to metrics.jsonl: its fields without "event", plus "time".
  Status RecordStep(const JsonObject& step_record);
  // Appends a rank's step times, as its heartbeat brought them, to rank_steps.jsonl (created on
  // first use), with "time" set to now.
  Status RecordRankSteps(records::RankSteps times);
  // Replaces state.json with `state` (pretty-printed, one field per line).
  Status WriteState(const JsonObject& state);

 private:
  RunJournal(FileSystem* fs, Clock* clock, const RunDir& dir,
             std::unique_ptr<AppendableFile> events, std::unique_ptr<AppendableFile> metrics,
             RunObserver* observer);

  FileSystem* fs_;
  Clock* clock_;
  std::string state_path_;
  std::string rank_steps_path_;
  std::unique_ptr<AppendableFile> events_;
  std::unique_ptr<AppendableFile> metrics_;
  std::unique_ptr<AppendableFile> rank_steps_;  // opened by the first RecordRankSteps
  RunObserver* observer_;
};

}  // namespace mitra::run
