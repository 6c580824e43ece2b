// The checkpoint directory: naming, durable writes, commit, verification, fallback, pruning.
//
//   <dir>/step-120.partial/   being written; never read
//   <dir>/step-120/           complete: every file fsynced, MANIFEST written last, renamed
//
// A reader only ever considers step-N directories whose MANIFEST parses and whose files all
// match their recorded size and CRC-32C; a damaged newest checkpoint falls back to the one
// before, and the reason names the file. No LibTorch here: the manager uses this too.
// Functions block on the disk; they are safe to call from several threads on different paths.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/manifest.h"
#include "mitra/common/status.h"

namespace mitra::checkpoint {

std::string StepDirectory(const std::string& dir, int64_t step);         // <dir>/step-N
std::string PartialDirectory(const std::string& dir, int64_t step);      // <dir>/step-N.partial

// Writes `bytes` to `path` (replacing it) and fsyncs it. IoError names the path and errno's text
// (a full disk reads "No space left on device").
Status WriteFileDurably(const std::string& path, std::string_view bytes);
Result<std::string> ReadWholeFile(const std::string& path);
// The same into a byte vector (what LibTorch's pickle_load takes), sized once from fstat.
Result<std::vector<char>> ReadFileBytes(const std::string& path);
// Checks `bytes` (the contents of `entry`'s file at `path`) against the entry's size and
// checksum; the error names the file.
Status CheckFile(const std::string& path, const FileEntry& entry, std::string_view bytes);

// Fails with a clear message when `dir` cannot be created or written (before training starts).
Status CheckWritable(const std::string& dir);

// Writes the manifest into step-N.partial, then renames the directory to step-N and fsyncs
// the parent: after this returns, a crash leaves either no checkpoint N or a complete one.
Status Commit(const std::string& dir, const Manifest& manifest);

// Steps of the complete-looking checkpoints (step-N directories), newest first. Unverified.
std::vector<int64_t> ListSteps(const std::string& dir);

// Parses the manifest of the checkpoint at `path` and checks every listed file's size and
// checksum. The error names the damaged file.
Result<Manifest> Verify(const std::string& path);
// Like Verify, but checks only the files named in `only`; `only` = {""} checks just the
// manifest (a worker then checks each file with CheckFile as it reads it).
Result<Manifest> VerifyFiles(const std::string& path, const std::vector<std::string>& only);

struct Found {
  int64_t step = 0;
  std::string path;
  Manifest manifest;
};
// The newest checkpoint that verifies. Each newer one that does not adds a line to `skipped`
// (which file, what is wrong). NotFound when there is none.
Result<Found> FindNewestValid(const std::string& dir, std::vector<std::string>* skipped);

// Keeps the newest `keep` complete checkpoints and removes older ones, and removes partial
// directories older than the newest complete checkpoint. `keep` < 1 keeps everything.
Status Prune(const std::string& dir, int keep);

}  // namespace mitra::checkpoint
