// FileSystem: the file seam. The manager writes its run directory only through it, so tests can
// run the manager's logic against an in-memory file system and script failures.
//
// Paths are plain strings, absolute or relative to the process's working directory.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "mitra/common/status.h"

namespace mitra {

// A file open for appending. Not thread-safe: one writer at a time. Closed on destruction.
class AppendableFile {
 public:
  virtual ~AppendableFile() = default;
  // Writes all of `data` at the end of the file. On return the bytes are visible to readers of
  // the file (they are in the OS, not in a user-space buffer), but not necessarily on disk.
  virtual Status Append(std::string_view data) = 0;
};

// Implementations must be thread-safe. Every call blocks on the disk.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual bool Exists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // Like `mkdir -p`: creates the missing parents too; an existing directory is fine.
  virtual Status CreateDirectories(const std::string& path) = 0;
  // NotFound when the file does not exist, IoError for anything else.
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  // Replaces `path` so that a reader (or a crash) sees either the old or the new contents,
  // never a mix: writes `path`.tmp, flushes it to disk, renames it over `path`.
  virtual Status WriteFileAtomically(const std::string& path, std::string_view contents) = 0;
  // Opens `path` for appending, creating it if needed (its directory must exist).
  virtual Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) = 0;
};

// The machine's file system, through POSIX calls. File descriptors are close-on-exec so they
// never leak into the processes the manager starts.
class PosixFileSystem : public FileSystem {
 public:
  bool Exists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  Status CreateDirectories(const std::string& path) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Status WriteFileAtomically(const std::string& path, std::string_view contents) override;
  Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) override;
};

// "a" + "b" -> "a/b"; an absolute `b` is returned as is.
std::string JoinPath(std::string_view a, std::string_view b);

// `path` with "." components, repeated and trailing '/' removed and "x/.." folded, lexically
// (symbolic links are not resolved): "/a/./b/../c/" -> "/a/c".
std::string NormalizePath(std::string_view path);

}  // namespace mitra
