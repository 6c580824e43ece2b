// DirectFile: a file written front to back, around the page cache where the file system allows.
//
// Why: a checkpoint's bytes are written once and not read again by this process, so copying
// them into the page cache only costs. The copy's destination is memory the kernel must find
// for every checkpoint: on a machine whose free memory is handed back to a hypervisor (free
// page reporting) every such page is faulted in afresh, and the copy ran at 300-500 MB/s
// where the disk takes 2 GB/s (docs/performance.md). With O_DIRECT the disk reads the
// caller's memory itself.
//
// Appended bytes go to the disk straight from the caller's memory when the piece starts at a
// kAlignment-aligned address and file offset; everything else is copied through an aligned
// buffer and written in aligned pieces. Where O_DIRECT is refused (a file system without it,
// /dev/full) the same calls write through the page cache, asking for early writeback of large
// pieces so that Close's fsync has little left to wait for.
//
// The machine's WritableFile (PosixFileSystem::NewWritableFile); callers reach it through the
// FileSystem seam. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/file_system.h"
#include "mitra/common/status.h"

namespace mitra {

class DirectFile : public WritableFile {
 public:
  // The alignment of address, offset and length that direct writes need (a page: at least
  // the logical block size of common disks).
  static constexpr size_t kAlignment = 4096;

  // Creates (or truncates) `path`. `direct` false writes through the page cache (for tests
  // and comparisons). IoError names the file.
  static Result<std::unique_ptr<DirectFile>> Create(const std::string& path, bool direct = true);
  ~DirectFile() override;  // closes; a file that was not closed is left incomplete

  // Appends `size` bytes. Returns once they are written or buffered; `data` may then be reused.
  // IoError names the file (a full disk reads "No space left on device").
  Status Append(const void* data, size_t size) override;
  // Writes what is buffered, sets the file's size, fsyncs and closes.
  Status Close() override;

  uint64_t size() const override { return size_; }  // bytes appended
  bool direct() const { return direct_; }  // writing around the page cache

 private:
  DirectFile(int fd, std::string path, bool direct, char* buffer);
  Status Write(const char* data, size_t size);  // at the file's position; falls back on EINVAL
  Status WriteBuffered(size_t size);            // the first `size` bytes of the buffer

  int fd_;
  std::string path_;
  bool direct_;
  struct FreeBuffer {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, FreeBuffer> buffer_;  // kBufferSize bytes, kAlignment-aligned
  size_t buffered_ = 0;                       // bytes in buffer_
  uint64_t written_ = 0;                      // bytes written to fd_
  uint64_t size_ = 0;                         // written_ + buffered_
  Status failed_;
};

}  // namespace mitra
