// MachineListWatcher: tells the manager when the machine list file has new contents.
//
// Two mechanisms feed one debounced check:
//   - inotify on the file's DIRECTORY, filtered to the file's name. Editors rarely write a file
//     in place: `sed -i` and many editors write a temporary file and rename it over the list,
//     vim may rename the old file away and create a new one, `echo > f` truncates then writes.
//     Watching the directory sees all of these; watching the file would lose track of it at
//     the first rename.
//   - polling (stat: inode, size, mtime, ctime) every `poll_interval_s`, always on. It is the
//     only mechanism where inotify is unavailable or disabled, and the safety net where
//     inotify stays silent (network file systems, a list that is a symbolic link into
//     another directory, a lost event queue).
// Any sign of activity (re)arms a deadline `debounce_s` ahead; when the file has been quiet
// that long the watcher reads it and reports its contents only if they differ from the last
// contents reported (or the baseline). So a rename-then-write or truncate-then-write counts
// once, and touching the file reports nothing. A missing file (deleted, or between the two
// steps of a replacement) is not a change; the contents it has when it reappears are.
//
// Time comes from a Clock (common/clock.h): the poll interval and the debounce are measured on
// its MonotonicSeconds, so a test drives them with a ManualClock, calling Tick() itself
// (Open() instead of Start()), and never sleeps.
//
// Parsing is the caller's business (ParseMachineList): the watcher reports raw text.
//
// Threading: Start() spawns one thread; `on_change` runs on it, never concurrently with itself.
// It must return quickly (the manager pushes an event onto its queue) since the watcher checks
// nothing while it runs, and it must not call Stop() (Stop joins the thread). Start, Open, Tick
// and Stop are called from one thread (the owner's); settled_checks() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "mitra/common/status.h"

namespace mitra::run {

struct WatcherOptions {
  // Seconds between stat() calls, with or without inotify.
  double poll_interval_s = 1.0;
  // Seconds the file must be quiet before it is read and compared.
  double debounce_s = 0.2;
  // false: polling only (what happens anyway when inotify cannot be set up).
  bool use_inotify = true;
  // The contents the caller has already acted on (typically the text it parsed at start-up).
  // If the file differs from this when the watcher starts, that is reported as a change. Unset:
  // the file's contents at Start() are the baseline (and a missing file has none, so whatever
  // appears is reported).
  std::optional<std::string> baseline;
};

class MachineListWatcher {
 public:
  using ChangeCallback = std::function<void(const std::string& contents)>;

  // `path` is used as given for every stat and read: a relative path resolves against the
  // working directory, which must not change while the watcher runs. Nothing happens before
  // Start(). `clock` (null: the machine's) must outlive the watcher.
  MachineListWatcher(std::string path, WatcherOptions options, ChangeCallback on_change,
                     const Clock* clock = nullptr);
  // Stops (see Stop).
  ~MachineListWatcher();

  MachineListWatcher(const MachineListWatcher&) = delete;
  MachineListWatcher& operator=(const MachineListWatcher&) = delete;

  // Sets up inotify (falling back to polling alone if that fails) and starts the thread. Fails
  // only if the thread's wake-up descriptor cannot be created, or if called twice (a stopped
  // watcher does not start again). Blocks for
  // one read of the file when no baseline was given.
  Status Start();
  // Start() without the thread: the caller runs Tick() when it wants the watcher to look (a test,
  // with a ManualClock). `on_change` then runs inside Tick().
  Status Open();
  // One wake-up of the watcher, at the clock's time: reads the inotify events that arrived (never
  // blocks for more), stats the file when one concerned it or a poll is due, and when the file
  // has been quiet for debounce_s reads it and reports it if it changed.
  void Tick();
  // The clock time (MonotonicSeconds) by which Tick() must run next, if no inotify event comes
  // first: the next poll, or the end of the quiet period.
  double NextWake() const;
  // Stops the thread and waits for it (and for a running `on_change`) to finish. Idempotent;
  // a no-op before Start() or Open(). No callback runs after Stop returns.
  void Stop();

  // Whether inotify is in use (false before Start, when disabled, or when it failed).
  bool using_inotify() const { return inotify_fd_ >= 0; }
  // How many times the file was read and compared after a quiet period. Lets a test wait for
  // the watcher to have looked at an edit that must not be reported.
  int64_t settled_checks() const { return settled_checks_.load(); }

 private:
  // What stat() says about the file; equal snapshots mean "probably unchanged".
  struct FileStamp {
    bool exists = false;
    uint64_t device = 0;
    uint64_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const FileStamp& other) const;
    bool operator!=(const FileStamp& other) const { return !(*this == other); }
  };

  FileStamp Stat() const;
  void AddDirectoryWatch();
  // Drains the inotify descriptor; true if an event concerned the file.
  bool ReadInotifyEvents();
  // Reads the file and reports it if it differs from the last contents reported.
  void CheckContents();
  void Loop();

  SystemClock system_clock_;
  const Clock* const clock_;
  const std::string path_;
  const std::string directory_;
  const std::string name_;
  const WatcherOptions options_;
  const ChangeCallback on_change_;

  int inotify_fd_ = -1;
  int watch_descriptor_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() writes it to end the loop
  std::thread thread_;
  bool started_ = false;
  bool stopped_ = false;
  std::atomic<int64_t> settled_checks_{0};

  // Only the watcher's thread touches these once it runs.
  std::optional<std::string> last_contents_;
  FileStamp last_stamp_;
  double next_poll_ = 0;  // clock time of the next stat, inotify or not
  // Whether something happened and the file is awaited to be quiet until `deadline_`. (A flag
  // and a time rather than std::optional: GCC warns about the latter here.)
  bool pending_ = false;
  double deadline_ = 0;
};

}  // namespace mitra::run
