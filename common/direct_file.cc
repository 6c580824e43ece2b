#include "common/direct_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace mitra {
namespace {

constexpr size_t kBufferSize = size_t{4} << 20;  // a multiple of kAlignment
// Through the page cache, pieces of this size and more are handed to writeback at once.
constexpr size_t kWritebackHint = size_t{1} << 20;

std::string ErrnoText() { return std::strerror(errno); }

bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % DirectFile::kAlignment == 0;
}

}  // namespace

void DirectFile::FreeBuffer::operator()(char* p) const { std::free(p); }

DirectFile::DirectFile(int fd, std::string path, bool direct, char* buffer)
    : fd_(fd), path_(std::move(path)), direct_(direct), buffer_(buffer) {}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<DirectFile>> DirectFile::Create(const std::string& path, bool direct) {
  // The owner's alone and never through a link; a FIFO nobody reads is refused rather than
  // waited on (IoError, also for a missing directory).
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return Status::IoError(ErrnoStatus("cannot create", path, errno).message());
  // Set afterwards rather than at open: a file system without O_DIRECT refuses it here
  // (EINVAL) and the file is written through the page cache instead.
  const int flags = ::fcntl(fd, F_GETFL);
  direct = direct && flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
  char* buffer = static_cast<char*>(std::aligned_alloc(kAlignment, kBufferSize));
  if (!buffer) {
    ::close(fd);
    return Status::IoError("cannot allocate a write buffer for " + path);
  }
  return std::unique_ptr<DirectFile>(new DirectFile(fd, path, direct, buffer));
}

Status DirectFile::Write(const char* data, size_t size) {
  const uint64_t start = written_;
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd_, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {
      // The device wants another alignment than kAlignment: go through the page cache from
      // here on (nothing of this piece was written).
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) {
        direct_ = false;
        continue;
      }
    }
    if (n <= 0) return failed_ = Status::IoError("cannot write " + path_ + ": " + ErrnoText());
    done += static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  if (!direct_ && size >= kWritebackHint) {
    // Start writing this piece to disk now, so that Close's fsync has little left to wait for
    // (a hint: failure changes nothing).
    (void)::sync_file_range(fd_, static_cast<off_t>(start), static_cast<off_t>(size),
                            SYNC_FILE_RANGE_WRITE);
  }
  return Status::Ok();
}

Status DirectFile::WriteBuffered(size_t size) {
  const Status s = Write(buffer_.get(), size);
  buffered_ = 0;
  return s;
}

Status DirectFile::Append(const void* data, size_t size) {
  if (!failed_.ok()) return failed_;
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // Whole aligned blocks at an aligned file offset go straight from the caller's memory;
    // through the page cache any large piece does (the copy into the cache is made anyway).
    const bool straight = direct_ ? buffered_ % kAlignment == 0 && Aligned(p) && size >= kAlignment
                                  : size >= kAlignment;
    if (straight) {
      if (buffered_ > 0) {
        if (Status s = WriteBuffered(buffered_); !s.ok()) return s;
      }
      const size_t n = direct_ ? size - size % kAlignment : size;
      if (Status s = Write(p, n); !s.ok()) return s;
      size_ += n;
      p += n;
      size -= n;
      continue;
    }
    const size_t n = std::min(size, kBufferSize - buffered_);
    std::memcpy(buffer_.get() + buffered_, p, n);
    buffered_ += n;
    size_ += n;
    p += n;
    size -= n;
    if (buffered_ == kBufferSize) {
      if (Status s = WriteBuffered(buffered_); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

Status DirectFile::Close() {
  if (!failed_.ok()) return failed_;
  size_t n = buffered_;
  if (direct_ && n % kAlignment != 0) {
    // Direct writes are whole blocks: pad the last one with zeros, then cut the file back.
    const size_t pad = kAlignment - n % kAlignment;
    std::memset(buffer_.get() + n, 0, pad);
    n += pad;
  }
  if (Status s = WriteBuffered(n); !s.ok()) return s;
  if (written_ != size_ && ::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
    return failed_ = Status::IoError("cannot set the size of " + path_ + ": " + ErrnoText());
  }
  if (::fsync(fd_) != 0) {
    return failed_ = Status::IoError("cannot fsync " + path_ + ": " + ErrnoText());
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    return failed_ = Status::IoError("cannot close " + path_ + ": " + ErrnoText());
  }
  return Status::Ok();
}

}  // namespace mitra
