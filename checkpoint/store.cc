#include "checkpoint/store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "checkpoint/crc32c.h"
#include "checkpoint/torch_zip.h"

namespace mitra::checkpoint {
namespace {

// "step-120" -> 120; -1 for anything else (including "step-120.partial").
int64_t StepOf(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string StepDirectory(const std::string& dir, int64_t step) {
  return JoinPath(dir, "step-" + std::to_string(step));
}

std::string PartialDirectory(const std::string& dir, int64_t step) {
  return StepDirectory(dir, step) + ".partial";
}

Status CheckFile(const std::string& path, const FileEntry& entry, std::string_view bytes) {
  if (bytes.size() != entry.bytes) {
    return Status::IoError(path + " holds " + std::to_string(bytes.size()) +
                           " bytes but the manifest says " + std::to_string(entry.bytes) +
                           " (truncated or overwritten)");
  }
  if (Crc32c(bytes) != entry.crc32c) {
    return Status::IoError(path + " does not match its checksum (the file is corrupt)");
  }
  return Status::Ok();
}

Status CheckWritable(FileSystem& fs, const std::string& dir) {
  if (Status s = CheckOwnDirectory(fs, dir, "checkpoint directory", "--checkpoint-dir"); !s.ok()) {
    return s;
  }
  if (Status s = fs.CreateDirectories(dir); !s.ok()) {
    return Status::InvalidArgument("checkpoint directory " + dir + " cannot be created (" +
                                   s.message() + "): choose another --checkpoint-dir");
  }
  // Every rank probes the same directory at once, perhaps from several machines: a name of its
  // own (host, pid, call) keeps one rank's rename from taking another's file.
  static std::atomic<uint64_t> calls{0};
  char host[256] = "";
  ::gethostname(host, sizeof(host) - 1);
  const std::string probe = JoinPath(dir, ".mitra-write-probe-" + std::string(host) + "-" +
                                              std::to_string(::getpid()) + "-" +
                                              std::to_string(calls.fetch_add(1)));
  Status s = fs.WriteFileAtomically(probe, "probe");
  fs.RemoveAll(probe);
  if (!s.ok()) {
    return Status::InvalidArgument("checkpoint directory " + dir + " is not writable (" +
                                   s.message() + "): fix its permissions or free space, or "
                                   "choose another --checkpoint-dir");
  }
  return Status::Ok();
}

Status Commit(FileSystem& fs, const std::string& dir, const Manifest& manifest) {
  const std::string partial = PartialDirectory(dir, manifest.step);
  const std::string final_dir = StepDirectory(dir, manifest.step);
  // The order is the protocol (docs/checkpoint-format.md): the manifest is on disk, and the
  // directory's entries with it, before the directory takes the name a reader trusts.
  if (Status s = fs.WriteFileAtomically(JoinPath(partial, kManifestName), manifest.Serialize());
      !s.ok()) {
    return s;
  }
  if (Status s = fs.SyncDirectory(partial); !s.ok()) return s;
  // A stale directory of the same step from an earlier life would make the rename fail.
  if (Status s = fs.RemoveAll(final_dir); !s.ok()) return s;
  if (Status s = fs.Rename(partial, final_dir); !s.ok()) return s;
  return fs.SyncDirectory(dir);
}

std::vector<int64_t> ListSteps(FileSystem& fs, const std::string& dir) {
  std::vector<int64_t> steps;
  Result<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return steps;  // no directory yet: no checkpoints
  for (const std::string& name : *names) {
    const int64_t step = StepOf(name);
    if (step >= 0 && fs.IsDirectory(JoinPath(dir, name))) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

Result<Manifest> VerifyFiles(FileSystem& fs, const std::string& path,
                             const std::vector<std::string>& only) {
  const std::string manifest_path = JoinPath(path, kManifestName);
  Result<std::string> text = fs.ReadFile(manifest_path);
  if (!text.ok() && text.status().code() == Status::Code::kNotFound) {
    return Status::NotFound(manifest_path + " is missing");
  }
  if (!text.ok()) return text.status();
  auto manifest = Manifest::Parse(*text, manifest_path);
  if (!manifest.ok()) return manifest.status();
  if (only.size() == 1 && only[0].empty()) return manifest;
  for (const auto& name : only) {
    if (!manifest->FindFile(name)) {
      return Status::IoError(manifest_path + " does not list " + name +
                             " (the checkpoint is incomplete)");
    }
  }
  for (const auto& f : manifest->files) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    // Streams the file through a fixed buffer, from the disk itself: a segment's file may be
    // large (store.h).
    const std::string file = JoinPath(path, f.name);
    Status s = ReadTensorFile(file, f.bytes, f.crc32c, f.tensors,
                              [](const TensorRecord&) -> void* { return nullptr; });
    if (!s.ok()) return Status::IoError(s.message());
  }
  return manifest;
}

Result<Manifest> Verify(FileSystem& fs, const std::string& path) {
  return VerifyFiles(fs, path, {});
}

Result<Found> FindNewestValid(FileSystem& fs, const std::string& dir,
                              std::vector<std::string>* skipped) {
  for (int64_t step : ListSteps(fs, dir)) {
    const std::string path = StepDirectory(dir, step);
    auto manifest = Verify(fs, path);
    if (manifest.ok()) return Found{step, path, std::move(*manifest)};
    if (skipped) {
      skipped->push_back("checkpoint step " + std::to_string(step) + " is not usable: " +
                         manifest.status().message());
    }
  }
  return Status::NotFound("no complete checkpoint in " + dir);
}

int64_t ResumeStep(FileSystem& fs, const std::string& dir, std::optional<int64_t> held_step,
                   const std::function<Result<Found>()>& find_newest_valid) {
  if (held_step) {
    const std::vector<int64_t> steps = ListSteps(fs, dir);
    if (steps.empty() || steps.front() <= *held_step) return *held_step;
  }
  const Result<Found> found = find_newest_valid();
  const int64_t stored = found.ok() ? found->step : 0;
  return held_step ? std::max(stored, *held_step) : stored;
}

Status Prune(FileSystem& fs, const std::string& dir, int keep) {
  if (keep < 1) return Status::Ok();
  const auto steps = ListSteps(fs, dir);
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    if (Status s = fs.RemoveAll(StepDirectory(dir, steps[i])); !s.ok()) {
      return Status::IoError("cannot remove old checkpoint " + StepDirectory(dir, steps[i]) +
                             ": " + s.message());
    }
  }
  if (steps.empty()) return Status::Ok();
  Result<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return Status::Ok();
  for (const std::string& name : *names) {
    const size_t dot = name.find(".partial");
    if (dot == std::string::npos || dot + 8 != name.size()) continue;
    const int64_t step = StepOf(name.substr(0, dot));
    // Best effort: a stale partial is never read, and the next save's prune tries again.
    if (step >= 0 && step < steps.front()) fs.RemoveAll(JoinPath(dir, name));
  }
  return Status::Ok();
}

// The machine's file system, for callers that have no FileSystem to pass. PosixFileSystem holds
// no state, so one per call costs nothing.

Status CheckWritable(const std::string& dir) {
  PosixFileSystem fs;
  return CheckWritable(fs, dir);
}

Status Commit(const std::string& dir, const Manifest& manifest) {
  PosixFileSystem fs;
  return Commit(fs, dir, manifest);
}

std::vector<int64_t> ListSteps(const std::string& dir) {
  PosixFileSystem fs;
  return ListSteps(fs, dir);
}

Result<Manifest> Verify(const std::string& path) {
  PosixFileSystem fs;
  return Verify(fs, path);
}

Result<Manifest> VerifyFiles(const std::string& path, const std::vector<std::string>& only) {
  PosixFileSystem fs;
  return VerifyFiles(fs, path, only);
}

Result<Found> FindNewestValid(const std::string& dir, std::vector<std::string>* skipped) {
  PosixFileSystem fs;
  return FindNewestValid(fs, dir, skipped);
}

Status Prune(const std::string& dir, int keep) {
  PosixFileSystem fs;
  return Prune(fs, dir, keep);
}

}  // namespace mitra::checkpoint
