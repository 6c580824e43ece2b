#include "common/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/direct_file.h"

namespace mitra {

Status ErrnoStatus(const std::string& what, const std::string& path, int error) {
  if (error == ELOOP) {  // O_NOFOLLOW met a link (or a path's links loop)
    return Status::IoError(what + " " + path + ": it is a symbolic link (or a loop of them), and "
                           "mitra opens the files it keeps without following links: remove the "
                           "link");
  }
  std::string message = what + " " + path + ": " + std::strerror(error);
  if (error == ENOENT) return Status::NotFound(std::move(message));
  return Status::IoError(std::move(message));
}

namespace {

// write(2) until all of `data` is written.
Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

class PosixAppendableFile : public AppendableFile {
 public:
  PosixAppendableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixAppendableFile() override { ::close(fd_); }
  PosixAppendableFile(const PosixAppendableFile&) = delete;
  PosixAppendableFile& operator=(const PosixAppendableFile&) = delete;

  Status Append(std::string_view data) override { return WriteAll(fd_, data, path_); }

 private:
  int fd_;
  std::string path_;
};

}  // namespace

Status CheckRegularFile(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("cannot stat", path, errno);
  if (S_ISREG(st.st_mode)) return Status::Ok();
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a device";
  return Status::IoError(path + " is " + kind + ", not a regular file: mitra reads and writes "
                         "only regular files");
}

Status CheckOwnDirectory(FileSystem& fs, const std::string& dir, std::string_view what,
                         std::string_view flag) {
  Result<Ownership> who = fs.OwnershipOf(dir);
  if (!who.ok() && who.status().code() == Status::Code::kNotFound) return Status::Ok();
  if (!who.ok()) return who.status();
  char mode[8];
  std::snprintf(mode, sizeof(mode), "%04o", who->mode);
  if (!who->ours) {
    return Status::InvalidArgument(std::string(what) + " " + dir + " belongs to another user (uid " +
                                   std::to_string(who->owner) + "), who could replace its files: "
                                   "pass " + std::string(flag) + " with a directory of your own");
  }
  if (who->others_may_write && (who->mode & S_ISVTX) != 0) {  // shared, like /tmp
    return Status::InvalidArgument(std::string(what) + " " + dir + " is shared by every user "
                                   "(mode " + mode + "), who could place files in it: pass " +
                                   std::string(flag) + " with a directory of your own, e.g. " +
                                   JoinPath(dir, "mine") + " (mitra creates it for you alone)");
  }
  if (who->others_may_write) {
    return Status::InvalidArgument(std::string(what) + " " + dir + " may be written by any user " +
                                   "(mode " + mode + "), who could replace its files: run `chmod "
                                   "o-w " + dir + "` or pass " + std::string(flag) +
                                   " with a directory of your own");
  }
  return Status::Ok();
}

Result<Ownership> PosixFileSystem::OwnershipOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("cannot stat", path, errno);
  Ownership who;
  who.owner = st.st_uid;
  who.ours = st.st_uid == ::geteuid();
  who.others_may_write = (st.st_mode & S_IWOTH) != 0;
  who.mode = st.st_mode & 07777;
  return who;
}

bool PosixFileSystem::Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool PosixFileSystem::IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status PosixFileSystem::CreateDirectories(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("cannot create a directory with an empty name");
  // Create each prefix in turn; EEXIST on a directory is fine.
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) == 0) continue;
    if (errno == EEXIST && IsDirectory(prefix)) continue;
    if (errno == EEXIST) {
      return Status::IoError("cannot create directory " + path + ": " + prefix +
                             " exists and is not a directory");
    }
    return ErrnoStatus("cannot create directory", prefix, errno);
  }
  return Status::Ok();
}

Result<std::string> PosixFileSystem::ReadFile(const std::string& path) {
  // Not blocking at open: a FIFO would wait for a writer; it is refused below instead.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  if (Status regular = CheckRegularFile(fd, path); !regular.ok()) {
    ::close(fd);
    return regular;
  }
  std::string contents;
  char buffer[16384];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus("cannot read", path, error);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

Status PosixFileSystem::WriteFileAtomically(const std::string& path, std::string_view contents) {
  // A name of its own (mkstemp: created here, mode 0600, never through a link someone left).
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot create", temp, errno);
  Status status = WriteAll(fd, contents, temp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoStatus("cannot sync", temp, errno);
  if (::close(fd) != 0 && status.ok()) status = ErrnoStatus("cannot close", temp, errno);
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus("cannot rename " + temp + " to", path, errno);
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

Result<std::unique_ptr<AppendableFile>> PosixFileSystem::OpenForAppend(const std::string& path) {
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  if (Status regular = CheckRegularFile(fd, path); !regular.ok()) {
    ::close(fd);
    return regular;
  }
  return std::unique_ptr<AppendableFile>(new PosixAppendableFile(fd, path));
}

Result<std::unique_ptr<WritableFile>> PosixFileSystem::NewWritableFile(const std::string& path,
                                                                       bool direct) {
  Result<std::unique_ptr<DirectFile>> file = DirectFile::Create(path, direct);
  if (!file.ok()) return file.status();
  return std::unique_ptr<WritableFile>(std::move(*file));
}

Status PosixFileSystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::Ok();
  return ErrnoStatus("cannot rename " + from + " to", to, errno);
}

Status PosixFileSystem::SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path, errno);
  Status status = ::fsync(fd) == 0 ? Status::Ok() : ErrnoStatus("cannot sync", path, errno);
  ::close(fd);
  return status;
}

Result<std::vector<std::string>> PosixFileSystem::ListDirectory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoStatus("cannot list", path, errno);
  std::vector<std::string> names;
  errno = 0;
  while (const struct dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  const int error = errno;
  ::closedir(dir);
  if (error != 0) return ErrnoStatus("cannot list", path, error);
  return names;
}

Status PosixFileSystem::RemoveAll(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? Status::Ok() : ErrnoStatus("cannot remove", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    Result<std::vector<std::string>> names = ListDirectory(path);
    if (!names.ok()) return names.status();
    for (const std::string& name : *names) {
      if (Status s = RemoveAll(JoinPath(path, name)); !s.ok()) return s;
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus("cannot remove", path, errno);
    }
    return Status::Ok();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus("cannot remove", path, errno);
  }
  return Status::Ok();
}

std::string CurrentDirectory() {
  std::vector<char> buffer(4096);
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) return ".";
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty() || (!b.empty() && b.front() == '/')) return std::string(b);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out += b;
  return out;
}

std::string NormalizePath(std::string_view path) {
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == ".." && !parts.empty() && parts.back() != "..") {
      parts.pop_back();
    } else if (part == ".." && absolute) {
      continue;  // "/.." is "/"
    } else {
      parts.push_back(part);
    }
  }
  std::string out = absolute ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

}  // namespace mitra
