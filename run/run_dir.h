// The run directory's layout (docs/mitra-run.md):
//
//   state.json      the manager's state, replaced atomically
//   events.jsonl    one record per decision (launch, worker exit, failure, stop, done)
//   metrics.jsonl   one record per step trained, and per evaluation
//   rank_steps.jsonl  each rank's compute and wait time per step
//   logs/gen-G/rank-R.log   everything rank R printed in generation G
//
// RunDir only computes paths and prepares the directory; RunJournal writes the records.
#pragma once

#include <cstdint>
#include <string>

#include "common/file_system.h"
#include "mitra/common/status.h"

namespace mitra::run {

class RunDir {
 public:
  // `path` should be absolute: workers get it as MITRA_RUN_DIR.
  explicit RunDir(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  std::string StatePath() const;
  std::string EventsPath() const;
  std::string MetricsPath() const;
  std::string RankStepsPath() const;  // rank_steps.jsonl: each rank's compute and wait times
  // "logs/gen-0/rank-1.log": the name used in messages.
  static std::string LogName(int64_t generation, int rank);
  std::string LogPath(int64_t generation, int rank) const;

  // Whether a run may use the directory: missing, empty, or holding an earlier run (which this
  // one continues), but not a file, nor a directory another user owns or may write
  // (InvalidArgument naming the fix). Creates nothing.
  Status CheckUsable(FileSystem& fs) const;
  // Whether an earlier run left its state.json or events.jsonl here.
  bool HoldsRun(FileSystem& fs) const;
  // The first generation whose logs/gen-G directory does not exist yet.
  int64_t NextGeneration(FileSystem& fs) const;
  // Creates the directory and logs/gen-`generation`/.
  Status Create(FileSystem& fs, int64_t generation) const;

 private:
  std::string path_;
};

}  // namespace mitra::run
