// Helpers for tests that run the real `mitra` binary: start it with arguments in a scratch
// directory, wait for output, signal it, and read back what it wrote in the run directory.
//
// Reusable by any end-to-end test (the fake worker's, and the real gpt_train's): nothing here
// knows which program mitra runs. Not thread-safe; every wait has a timeout, so a hung mitra
// fails the test instead of hanging it (it is SIGKILLed).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace mitra::testing {

// A fresh empty directory "<prefix>-XXXXXX" under $TMPDIR (or /tmp), left for the caller to
// remove. Throws std::runtime_error when it cannot be made.
std::string MakeTempDir(const std::string& prefix);

// A MakeTempDir("mitra-test"), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  // Writes `contents` to path()/`name`; returns the full path.
  std::string Write(const std::string& name, const std::string& contents) const;

 private:
  std::string path_;
};

struct MitraResult {
  int exit_code = -1;   // -1 when mitra was killed by a signal
  int term_signal = 0;  // the signal that killed it, 0 otherwise
  bool timed_out = false;
  std::string out;  // its stdout
  std::string err;  // its stderr
  std::string output() const { return out + err; }
};

// One running `mitra` (or any program) with stdout and stderr captured to files.
class MitraProcess {
 public:
  // Starts `binary` with `args` in `working_dir`, with the test's environment plus `env`.
  // Returns nullptr (and prints why) if it cannot be started.
  static std::unique_ptr<MitraProcess> Start(const std::string& binary,
                                             const std::vector<std::string>& args,
                                             const std::string& working_dir,
                                             const std::map<std::string, std::string>& env = {});
  // SIGKILLs the process if it is still running, and reaps it.
  ~MitraProcess();

  pid_t pid() const { return pid_; }
  std::string Stdout() const;
  std::string Stderr() const;
  // Waits until stdout contains `text` (`count` times); false on timeout or if the process
  // exited first.
  bool WaitForStdout(const std::string& text, double timeout_s, size_t count = 1);
  void Signal(int signal_number);
  // Waits for the exit; after `timeout_s` SIGKILLs it and reports timed_out.
  MitraResult Wait(double timeout_s);

 private:
  MitraProcess() = default;
  bool Reap(int options);  // true once reaped

  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_path_;
  std::string err_path_;
  std::unique_ptr<TempDir> capture_dir_;
};

// Runs `binary args...` in `working_dir` to completion (at most `timeout_s`).
MitraResult RunProgram(const std::string& binary, const std::vector<std::string>& args,
                       const std::string& working_dir, double timeout_s = 30,
                       const std::map<std::string, std::string>& env = {});

// The file's contents, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);
// One JsonObject per non-empty line; a line that does not parse becomes an object with the
// single field "unparsed" holding the line, so tests can report it.
std::vector<JsonObject> ReadJsonLines(const std::string& path);
std::optional<JsonObject> ReadJsonFile(const std::string& path);
// The records (`@mitra <json>` lines, docs/worker-contract.md) of a worker's log text, in order;
// lines that do not parse are skipped.
std::vector<JsonObject> WorkerRecords(std::string_view log_text);
// Records of events.jsonl with "event" == `name`.
std::vector<JsonObject> EventsNamed(const std::string& run_dir, const std::string& name);
// Every pid in the "pids" arrays of the launch records of events.jsonl.
std::vector<pid_t> LaunchedPids(const std::string& run_dir);
// The pids of one `launch` record (those > 0: the ranks started or kept), by rank.
std::vector<pid_t> LaunchPids(const JsonObject& launch);
// True when no process `pid` exists (kill(pid, 0) fails with ESRCH). A zombie still exists.
bool ProcessGone(pid_t pid);

}  // namespace mitra::testing
