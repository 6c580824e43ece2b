// FileSystem: the file seam. The manager writes its run directory, and the checkpointer its
// checkpoints (tensor files, manifest, commit), only through it, so tests can run that logic
// against an in-memory file system and script failures (tests/common/memory_file_system.h,
// faulty_file_system.h).
//
// Paths are plain strings, absolute or relative to the process's working directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

// A new file written front to back, once: a checkpoint's tensor file. Not thread-safe: one
// writer at a time. Destroyed without Close(), the file is left as far as it was written.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends `size` bytes; `data` may be reused once it returns. The bytes may wait in a buffer
  // until a later Append or Close.
  virtual Status Append(const void* data, size_t size) = 0;
  // Writes what is buffered, flushes the file to disk (fsync) and closes it. Once it returns
  // OK, the file survives a crash as soon as its directory entry does (SyncDirectory).
  virtual Status Close() = 0;
  // Bytes appended so far.
  virtual uint64_t size() const = 0;
};

// Who may change a file or directory.
struct Ownership {
  bool ours = true;                // owned by the process's effective user
  bool others_may_write = false;   // writable by users outside its owner and group
  uint32_t owner = 0;              // the owner's user id
  uint32_t mode = 0;               // the permission bits (0755, ...)
};

// Implementations must be thread-safe. Every call blocks on the disk.
class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual bool Exists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // Like `mkdir -p`: creates the missing parents too, mode 0700 (the owner's alone); an existing
  // directory is fine and keeps its mode.
  virtual Status CreateDirectories(const std::string& path) = 0;
  // Who owns `path` (a link's target) and who else may write it. NotFound when it does not
  // exist.
  virtual Result<Ownership> OwnershipOf(const std::string& path) = 0;
  // NotFound when the file does not exist, IoError for anything else, at once for what is not a
  // regular file (a FIFO is never waited on).
  virtual Result<std::string> ReadFile(const std::string& path) = 0;
  // Replaces `path` so that a reader (or a crash) sees either the old or the new contents,
  // never a mix: writes a temporary file of its own beside it (`path`.tmp.XXXXXX, created with
  // O_EXCL, mode 0600), flushes it to disk, renames it over `path`.
  virtual Status WriteFileAtomically(const std::string& path, std::string_view contents) = 0;
  // Opens `path` for appending, creating it (mode 0600) if needed (its directory must exist). A
  // symbolic link or anything but a regular file at `path` is refused, never written through.
  virtual Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) = 0;
  // Creates (or truncates) `path` to be written front to back (its directory must exist).
  // `direct`: large, aligned pieces may go to the disk around the page cache, where the file
  // system allows (a file written once and not read back by this process: common/direct_file.h).
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                                bool direct) = 0;
  // Like rename(2): moves a file or directory, replacing a file (or an empty directory) at
  // `to`. Atomic, but durable only once `to`'s directory is synced.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Flushes a directory's entries to disk (fsync of the directory), so that the files created,
  // renamed or removed in it survive a crash.
  virtual Status SyncDirectory(const std::string& path) = 0;
  // The names in a directory ("." and ".." excluded), in no particular order. NotFound when it
  // does not exist.
  virtual Result<std::vector<std::string>> ListDirectory(const std::string& path) = 0;
  // Like `rm -r`: removes a file or a directory and everything in it; a missing path is fine.
  virtual Status RemoveAll(const std::string& path) = 0;
};

// The machine's file system, through POSIX calls. File descriptors are close-on-exec so they
// never leak into the processes the manager starts.
class PosixFileSystem : public FileSystem {
 public:
  bool Exists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;
  Status CreateDirectories(const std::string& path) override;
  Result<Ownership> OwnershipOf(const std::string& path) override;
  Result<std::string> ReadFile(const std::string& path) override;
  Status WriteFileAtomically(const std::string& path, std::string_view contents) override;
  Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) override;
  // A DirectFile (common/direct_file.h).
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool direct) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDirectory(const std::string& path) override;
  Result<std::vector<std::string>> ListDirectory(const std::string& path) override;
  Status RemoveAll(const std::string& path) override;
};

// "cannot open /x/y: No such file or directory" from `what`, `path` and an errno value: NotFound
// for ENOENT (callers tell a missing file from a failing disk by it), IoError for the rest.
Status ErrnoStatus(const std::string& what, const std::string& path, int error);

// OK when `dir` is missing or is a directory this user owns that no other user may write;
// otherwise InvalidArgument saying why and how to fix it (`what` names the directory in the
// message: "run directory", "checkpoint directory"; `flag` is the option that chooses another).
// A directory another user owns or may write could have its files replaced with links or
// FIFOs, or its records and checkpoints forged.
Status CheckOwnDirectory(FileSystem& fs, const std::string& dir, std::string_view what,
                         std::string_view flag);

// OK when `fd` (opened from `path`) is a regular file; an IoError naming what it is (a FIFO, a
// device, a socket, a directory) otherwise, so that no read waits on a writer that never comes.
Status CheckRegularFile(int fd, const std::string& path);

// The process's working directory, or "." when it cannot be read (removed, or a path longer
// than the kernel returns).
std::string CurrentDirectory();

// "a" + "b" -> "a/b"; an absolute `b` is returned as is.
std::string JoinPath(std::string_view a, std::string_view b);

// `path` with "." components, repeated and trailing '/' removed and "x/.." folded, lexically
// (symbolic links are not resolved): "/a/./b/../c/" -> "/a/c".
std::string NormalizePath(std::string_view path);

}  // namespace mitra
