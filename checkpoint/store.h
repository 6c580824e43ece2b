// The checkpoint directory: naming, durable writes, commit, verification, fallback, pruning.
//
//   <dir>/step-120.partial/   being written; never read
//   <dir>/step-120/           complete: every file fsynced, MANIFEST written last, renamed
//
// A reader only ever considers step-N directories whose MANIFEST parses and whose files all
// match their recorded size and CRC-32C; a damaged newest checkpoint falls back to the one
// before, and the reason names the file. No LibTorch here: the manager uses this too.
// Functions block on the disk; they are safe to call from several threads on different paths
// (given a thread-safe FileSystem, as every implementation is).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/file_system.h"
#include "mitra/common/status.h"

namespace mitra::checkpoint {

std::string StepDirectory(const std::string& dir, int64_t step);         // <dir>/step-N
std::string PartialDirectory(const std::string& dir, int64_t step);      // <dir>/step-N.partial

// Checks `bytes` (the contents of `entry`'s file at `path`) against the entry's size and
// checksum; the error names the file.
Status CheckFile(const std::string& path, const FileEntry& entry, std::string_view bytes);

// The functions below reach the checkpoint directory through `fs`: its manifests, renames,
// directory syncs, listings and removals, so a test can fail or cut short any step of a save
// (tests/common/faulty_file_system.h). The tensor files, which the checkpointer writes through
// the same `fs` (TorchZipWriter), are read and checksummed straight from the disk
// (ReadTensorFile), so `fs` must show the machine's files. Each function has an overload
// without `fs` that uses the machine's file system (PosixFileSystem).

// Fails with a clear message when `dir` cannot be created or written, or belongs to another
// user or may be written by any (CheckOwnDirectory), before training starts.
Status CheckWritable(FileSystem& fs, const std::string& dir);
Status CheckWritable(const std::string& dir);

// Writes the manifest into step-N.partial (whose files must already be on disk), syncs that
// directory, renames it to step-N and syncs the parent: after this returns, a crash leaves
// checkpoint N complete; a crash before it returns leaves either no checkpoint N or a complete
// one.
Status Commit(FileSystem& fs, const std::string& dir, const Manifest& manifest);
Status Commit(const std::string& dir, const Manifest& manifest);

// Steps of the complete-looking checkpoints (step-N directories), newest first. Unverified.
std::vector<int64_t> ListSteps(FileSystem& fs, const std::string& dir);
std::vector<int64_t> ListSteps(const std::string& dir);

// Parses the manifest of the checkpoint at `path` and checks every listed file's size and
// checksum. The error names the damaged file.
Result<Manifest> Verify(FileSystem& fs, const std::string& path);
Result<Manifest> Verify(const std::string& path);
// Like Verify, but checks only the files named in `only`; `only` = {""} checks just the
// manifest (a worker then checks each file with CheckFile as it reads it).
Result<Manifest> VerifyFiles(FileSystem& fs, const std::string& path,
                             const std::vector<std::string>& only);
Result<Manifest> VerifyFiles(const std::string& path, const std::vector<std::string>& only);

struct Found {
  int64_t step = 0;
  std::string path;
  Manifest manifest;
};
// The newest checkpoint that verifies. Each newer one that does not adds a line to `skipped`
// (which file, what is wrong). NotFound when there is none.
Result<Found> FindNewestValid(FileSystem& fs, const std::string& dir,
                              std::vector<std::string>* skipped);
Result<Found> FindNewestValid(const std::string& dir, std::vector<std::string>* skipped);

// The step a job resumes from. `held_step`: the step whose state the workers it keeps hold in
// memory, between them, for every segment (none: nothing is held). When no checkpoint listed in
// `dir` is newer, that step, and storage is not read (verifying reads every byte: seconds for a
// large model, on the path of every morph; a worker checks each file it does read). Otherwise
// the step of `find_newest_valid` (FindNewestValid, 0 when NotFound), or the held step when
// that is newer.
int64_t ResumeStep(FileSystem& fs, const std::string& dir, std::optional<int64_t> held_step,
                   const std::function<Result<Found>()>& find_newest_valid);

// Keeps the newest `keep` complete checkpoints and removes older ones, and removes partial
// directories older than the newest complete checkpoint. `keep` < 1 keeps everything.
Status Prune(FileSystem& fs, const std::string& dir, int keep);
Status Prune(const std::string& dir, int keep);

}  // namespace mitra::checkpoint
