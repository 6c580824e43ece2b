#include "run/machine_list_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace mitra::run {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string NameOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The whole file, or nullopt if it cannot be read now (missing, or being replaced).
std::optional<std::string> ReadWholeFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string contents;
  char buffer[8192];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

int64_t Nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// Milliseconds from `now` until `when` (clock seconds), rounded up so that poll() does not wake
// just before it.
int MillisecondsUntil(double when, double now) {
  if (when <= now) return 0;
  return static_cast<int>(std::min(std::ceil((when - now) * 1000), 60.0 * 1000));
}

}  // namespace

bool MachineListWatcher::FileStamp::operator==(const FileStamp& other) const {
  return exists == other.exists && device == other.device && inode == other.inode &&
         size == other.size && mtime_ns == other.mtime_ns && ctime_ns == other.ctime_ns;
}

MachineListWatcher::MachineListWatcher(std::string path, WatcherOptions options,
                                       ChangeCallback on_change, const Clock* clock)
    : clock_(clock != nullptr ? clock : &system_clock_),
      path_(std::move(path)),
      directory_(DirectoryOf(path_)),
      name_(NameOf(path_)),
      options_(std::move(options)),
      on_change_(std::move(on_change)) {}

MachineListWatcher::~MachineListWatcher() { Stop(); }

Status MachineListWatcher::Start() {
  if (Status s = Open(); !s.ok()) return s;
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Status MachineListWatcher::Open() {
  if (started_ || stopped_) {
    return Status::Internal("MachineListWatcher::Start called twice for " + path_);
  }
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    return Status::IoError("cannot watch " + path_ + ": eventfd: " + std::strerror(errno));
  }
  if (options_.use_inotify) {
    // Failure (no inotify, or the per-user limit reached) leaves polling to do the work.
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd_ >= 0) AddDirectoryWatch();
  }
  last_stamp_ = Stat();
  last_contents_ = options_.baseline ? options_.baseline : ReadWholeFile(path_);
  const double now = clock_->MonotonicSeconds();
  next_poll_ = now + std::max(options_.poll_interval_s, 0.001);
  // A given baseline is compared at once: the file may have changed before Start.
  pending_ = options_.baseline.has_value();
  deadline_ = now;
  started_ = true;
  return Status::Ok();
}

void MachineListWatcher::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  const uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  ::close(wake_fd_);
  inotify_fd_ = -1;
  watch_descriptor_ = -1;
  wake_fd_ = -1;
}

MachineListWatcher::FileStamp MachineListWatcher::Stat() const {
  FileStamp stamp;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return stamp;
  stamp.exists = true;
  stamp.device = static_cast<uint64_t>(st.st_dev);
  stamp.inode = static_cast<uint64_t>(st.st_ino);
  stamp.size = static_cast<int64_t>(st.st_size);
  stamp.mtime_ns = Nanoseconds(st.st_mtim);
  stamp.ctime_ns = Nanoseconds(st.st_ctim);
  return stamp;
}

void MachineListWatcher::AddDirectoryWatch() {
  constexpr uint32_t kMask = IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE |
                             IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                             IN_ONLYDIR;
  watch_descriptor_ = ::inotify_add_watch(inotify_fd_, directory_.c_str(), kMask);
}

bool MachineListWatcher::ReadInotifyEvents() {
  bool relevant = false;
  alignas(struct inotify_event) char buffer[16 * 1024];
  while (true) {
    const ssize_t n = ::read(inotify_fd_, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: drained
    for (ssize_t offset = 0; offset < n;) {
      const auto* event = reinterpret_cast<const struct inotify_event*>(buffer + offset);
      offset += static_cast<ssize_t>(sizeof(struct inotify_event) + event->len);
      if (event->mask & IN_Q_OVERFLOW) {
        relevant = true;  // events were lost: assume the worst
      } else if (event->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
        // The directory went away or moved: our path may now name another directory. Drop the
        // watch; the next poll sets it up again on whatever the path names then.
        if (watch_descriptor_ >= 0 && !(event->mask & IN_IGNORED)) {
          ::inotify_rm_watch(inotify_fd_, watch_descriptor_);
        }
        watch_descriptor_ = -1;
        relevant = true;
      } else if (event->len > 0 && name_ == event->name) {
        relevant = true;
      }
    }
  }
  return relevant;
}

void MachineListWatcher::CheckContents() {
  const std::optional<std::string> contents = ReadWholeFile(path_);
  ++settled_checks_;
  if (!contents) return;  // missing: not a change until it reappears
  if (last_contents_ && *last_contents_ == *contents) return;
  last_contents_ = contents;
  on_change_(*contents);
}

double MachineListWatcher::NextWake() const {
  return pending_ ? std::min(deadline_, next_poll_) : next_poll_;
}

void MachineListWatcher::Tick() {
  const double now = clock_->MonotonicSeconds();
  bool activity = inotify_fd_ >= 0 && ReadInotifyEvents();
  const bool poll_due = now >= next_poll_;
  if (poll_due) {
    next_poll_ = now + std::max(options_.poll_interval_s, 0.001);
    if (inotify_fd_ >= 0 && watch_descriptor_ < 0) AddDirectoryWatch();
  }
  // One stat per wake-up: it both notices changes inotify missed and tells whether the file
  // is still being written when the deadline comes.
  if (activity || poll_due || (pending_ && now >= deadline_)) {
    const FileStamp stamp = Stat();
    if (stamp != last_stamp_) {
      last_stamp_ = stamp;
      activity = true;
    }
  }
  if (activity) {
    pending_ = true;
    deadline_ = now + std::max(options_.debounce_s, 0.0);
  } else if (pending_ && now >= deadline_) {
    pending_ = false;
    CheckContents();
  }
}

void MachineListWatcher::Loop() {
  while (true) {
    struct pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {inotify_fd_, POLLIN, 0}};
    const nfds_t count = inotify_fd_ >= 0 ? 2 : 1;
    const int ready =
        ::poll(fds, count, MillisecondsUntil(NextWake(), clock_->MonotonicSeconds()));
    if (ready < 0 && errno != EINTR) return;  // cannot happen with valid descriptors
    if (fds[0].revents != 0) return;          // Stop()
    Tick();
  }
}

}  // namespace mitra::run
