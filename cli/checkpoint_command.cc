#include "cli/checkpoint_command.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "checkpoint/store.h"
#include "checkpoint/torch_zip.h"
#include "cli/run_command.h"

namespace mitra::cli {
namespace fs = std::filesystem;

namespace {

std::string Megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

// The key a tensor of `file` gets in the exported state dict: parameters and buffers under
// "model" by their full names (a state dict, as torch's: the module's own keys when
// `module_keys`), optimizer state under "optimizer/<kind>/<segment>.<name>", the trainer's
// state under "trainer".
std::string ExportKey(const std::string& segment, const std::string& name, bool module_keys) {
  if (segment.empty()) return "trainer/" + name;
  const size_t slash = name.find('/');
  const std::string kind = name.substr(0, slash);
  const std::string within = name.substr(slash + 1);
  const std::string full = segment + "." + within;
  if (kind == "param" || kind == "buffer") return "model/" + (module_keys ? within : full);
  return "optimizer/" + kind + "/" + full;
}

// Copies the tensors of checkpoint `path` (verified: `manifest`) into one file at `target`,
// one source file in memory at a time; each is checked against its checksum as it is read.
Status WriteExport(const std::string& path, const checkpoint::Manifest& manifest,
                   const std::string& target, size_t* tensors) {
  checkpoint::TorchZipOptions options;
  options.nest_separator = '/';
  auto writer = checkpoint::TorchZipWriter::Create(target, options);
  if (!writer.ok()) return writer.status();
  std::vector<std::pair<std::string, std::string>> sources;  // (segment or "", file)
  for (const std::string& segment : manifest.segments) {
    sources.emplace_back(segment, checkpoint::SegmentFileName(segment));
  }
  sources.emplace_back("", checkpoint::kTrainerFileName);
  std::set<std::string> keys;  // a weight tied across segments has one module key
  for (const auto& [segment, name] : sources) {
    const checkpoint::FileEntry* entry = manifest.FindFile(name);
    if (!entry) {
      return Status::IoError(path + "/" + checkpoint::kManifestName + " does not list " + name +
                             " (the checkpoint is incomplete)");
    }
    std::vector<size_t> at;  // where each tensor lies in `data`
    size_t total = 0;
    for (const checkpoint::TensorRecord& t : entry->tensors) {
      at.push_back(total);
      total += t.bytes();
    }
    std::vector<char> data(total);
    size_t index = 0;
    Status read = checkpoint::ReadTensorFile(
        (fs::path(path) / name).string(), entry->bytes, entry->crc32c, entry->tensors,
        [&](const checkpoint::TensorRecord&) -> void* { return data.data() + at[index++]; });
    if (!read.ok()) return read;
    for (size_t i = 0; i < entry->tensors.size(); ++i) {
      const checkpoint::TensorRecord& t = entry->tensors[i];
      const std::string key = ExportKey(segment, t.name, manifest.module_keys);
      if (!keys.insert(key).second) continue;
      if (Status s = (*writer)->Add(key, t.dtype, t.shape, data.data() + at[i]); !s.ok()) {
        return s;
      }
      ++*tensors;
    }
  }
  auto written = (*writer)->Finish();
  return written.ok() ? Status::Ok() : written.status();
}

int Export(const CheckpointCommandOptions& options, std::ostream& out, std::ostream& err) {
  const std::string what = "mitra checkpoint export: ";
  std::error_code ec;
  std::string path = options.dir;
  if (!fs::exists(fs::path(path) / checkpoint::kManifestName, ec)) {  // a checkpoint directory
    if (!fs::is_directory(path, ec)) {
      err << what << path << " is not a directory; give a checkpoint directory (e.g. "
          << "mitra-run/checkpoints) or one checkpoint in it (e.g. mitra-run/checkpoints/step-100)\n";
      return kExitBadInput;
    }
    std::vector<std::string> skipped;
    auto found = checkpoint::FindNewestValid(path, &skipped);
    for (const std::string& why : skipped) err << what << why << "\n";
    if (!found.ok()) {
      err << what << found.status().message() << "; nothing was written\n";
      return kExitBadInput;
    }
    path = found->path;
  }
  auto manifest = checkpoint::Verify(path);
  if (!manifest.ok()) {
    err << what << "refusing a damaged checkpoint: " << manifest.status().message()
        << "; nothing was written (export an older step, see `mitra checkpoint list`)\n";
    return kExitBadInput;
  }
  // Written beside the target and renamed: a failed export leaves no half file under its name.
  const std::string temporary = options.out + ".partial-" + std::to_string(::getpid());
  size_t tensors = 0;
  Status s = WriteExport(path, *manifest, temporary, &tensors);
  if (s.ok() && ::rename(temporary.c_str(), options.out.c_str()) != 0) {
    s = Status::IoError("cannot rename " + temporary + " to " + options.out);
  }
  if (!s.ok()) {
    fs::remove(temporary, ec);
    err << what << s.message() << "; nothing was written\n";
    return kExitFailed;
  }
  out << "exported step " << manifest->step << " of " << path << " (" << tensors << " tensors, "
      << Megabytes(fs::file_size(options.out, ec)) << ") to " << options.out
      << "; in Python: torch.load('" << options.out
      << "', weights_only=True) gives {'model': ..., 'optimizer': ..., 'trainer': ...}\n";
  return kExitOk;
}

}  // namespace

int CheckpointCommand(const CheckpointCommandOptions& options, std::ostream& out,
                      std::ostream& err) {
  if (options.action == "export") return Export(options, out, err);
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
  if (steps.empty()) {
    out << "no complete checkpoint in " << options.dir << "\n";
    const fs::path nested = fs::path(options.dir) / "checkpoints";
    if (fs::is_directory(nested, ec)) {
      out << "(" << options.dir << " looks like a run directory: its checkpoints are in "
          << nested.string() << ")\n";
    }
    if (options.action == "verify") return kExitFailed;  // nothing verified is no verdict
  }
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

}  // namespace mitra::cli
