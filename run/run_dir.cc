#include "run/run_dir.h"

#include "records/records.h"

namespace mitra::run {

std::string RunDir::StatePath() const { return JoinPath(path_, records::kStateFile); }
std::string RunDir::EventsPath() const { return JoinPath(path_, records::kEventsFile); }
std::string RunDir::MetricsPath() const { return JoinPath(path_, records::kMetricsFile); }
std::string RunDir::RankStepsPath() const { return JoinPath(path_, records::kRankStepsFile); }

std::string RunDir::LogName(int64_t generation, int rank) {
  return records::GenerationLogDir(generation) + "/rank-" + std::to_string(rank) + ".log";
}

std::string RunDir::LogPath(int64_t generation, int rank) const {
  return JoinPath(path_, LogName(generation, rank));
}

Status RunDir::CheckUsable(FileSystem& fs) const {
  if (!fs.Exists(path_)) return Status::Ok();
  if (!fs.IsDirectory(path_)) {
    return Status::InvalidArgument("run directory " + path_ +
                                   " exists and is not a directory; pass --run-dir with "
                                   "another name");
  }
  return CheckOwnDirectory(fs, path_, "run directory", "--run-dir");
}

bool RunDir::HoldsRun(FileSystem& fs) const {
  return fs.Exists(StatePath()) || fs.Exists(EventsPath());
}

int64_t RunDir::NextGeneration(FileSystem& fs) const {
  int64_t next = 0;
  while (fs.Exists(JoinPath(path_, records::GenerationLogDir(next)))) ++next;
  return next;
}

Status RunDir::Create(FileSystem& fs, int64_t generation) const {
  return fs.CreateDirectories(JoinPath(path_, records::GenerationLogDir(generation)));
}

}  // namespace mitra::run
