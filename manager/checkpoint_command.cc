#include "manager/checkpoint_command.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/store.h"
#include "manager/run_command.h"

namespace mitra::manager {
namespace fs = std::filesystem;

namespace {

std::string Megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

int CheckpointCommand(const CheckpointCommandOptions& options, std::ostream& out,
                      std::ostream& err) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) {
    err << "mitra checkpoint: " << options.dir
        << " is not a directory; give a checkpoint directory (e.g. mitra-run/checkpoints)\n";
    return kExitBadInput;
  }
  int damaged = 0;
  const auto steps = checkpoint::ListSteps(options.dir);
  for (int64_t step : steps) {
    const std::string path = checkpoint::StepDirectory(options.dir, step);
    auto manifest = checkpoint::Verify(path);
    if (!manifest.ok()) {
      ++damaged;
      out << "step " << step << "  DAMAGED: " << manifest.status().message() << "\n";
      continue;
    }
    uint64_t bytes = 0;
    for (const auto& f : manifest->files) bytes += f.bytes;
    out << "step " << step << "  written by " << manifest->stages << " x " << manifest->replicas
        << " (partition " << manifest->partition << ", " << manifest->schedule << ")  "
        << manifest->files.size() << " files, " << Megabytes(bytes) << "  ok\n";
  }
  for (const auto& entry : fs::directory_iterator(options.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".partial") == 0) {
      out << name << "  incomplete (never loaded)\n";
    }
  }
  if (steps.empty()) out << "no complete checkpoint in " << options.dir << "\n";
  if (options.action == "verify") {
    if (damaged > 0) {
      err << "mitra checkpoint: " << damaged << " of " << steps.size()
          << " checkpoints do not verify; `mitra run` resumes from the newest one that does\n";
      return kExitFailed;
    }
    out << "all " << steps.size() << " checkpoints verify\n";
  }
  return kExitOk;
}

}  // namespace mitra::manager
