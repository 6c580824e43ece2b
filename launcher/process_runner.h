// ProcessRunner: the seam through which the manager starts workers and learns what they do.
//
// The manager never forks or signals processes itself. It hands a ProcessSpec to a runner and
// receives ProcessEvents: the `@mitra` messages a process prints and, once, how it exited.
// LocalProcessRunner (local_process_runner.h) runs processes on this machine; an SSH runner
// for remote hosts will implement the same interface; tests use a scripted fake.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::launcher {

// The longest line SendLine takes (a placement of the largest job is well within it).
inline constexpr size_t kMaxSentLine = 1 << 20;
// How long SendLine waits, by default, for a process to read what does not fit its input.
inline constexpr double kSendLineTimeoutS = 5;

// Ok for a line SendLine may send; InvalidArgument, saying why, for one with a newline in it or
// longer than kMaxSentLine. Every runner checks this first.
Status CheckSentLine(const std::string& line);

struct ProcessSpec {
  std::string program;                             // as returned by ResolveProgram
  std::vector<std::string> args;                   // argv[1..]
  std::map<std::string, std::string> environment;  // the child's entire environment
  std::string working_directory;                   // "": the runner's own
  std::string log_path;  // every byte of stdout and stderr is appended here; "": no log
  // Names in `environment` whose values are secrets (the job token, docs/security.md): no
  // runner puts them on a command line, where any user of the machine could read them. The
  // local and srun runners pass the environment itself (readable only by its user); the SSH
  // runner writes these values to the process's standard input, from which a shell of its own
  // reads them into the environment before it execs the program.
  std::vector<std::string> secrets;
};

struct ExitStatus {
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that ended the process; 0 when it exited by itself
  bool lost = false;  // the connection to the host was lost; the process's fate is unknown

  bool ok() const { return !lost && signal == 0 && exit_code == 0; }
  // "exited with code 3", "was killed by signal SIGKILL".
  std::string ToString() const;
};

// What a short command (a health check, a signal sent through a tool) did: SshProcessRunner's
// RunCommand, RunLocalCommand (local_command.h).
struct CommandResult {
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the signal that ended it; 0 when it exited by itself
  std::string out;    // all of its stdout
  std::string err;    // all of its stderr
  bool ok() const { return signal == 0 && exit_code == 0; }
};

// Assigned by a runner; unique within it and never reused (unlike OS pids).
using ProcessId = int64_t;

struct ProcessEvent {
  enum class Kind { kMessage, kExited };

  Kind kind = Kind::kMessage;
  ProcessId id = 0;
  std::string message;                  // kMessage: the line after contract::kMessagePrefix
  ExitStatus exit;                      // kExited
  std::vector<std::string> last_lines;  // kExited: the last lines of output (both streams)
  // kExited: error lines from before `last_lines` (output_lines.h's LineTail), oldest first.
  std::vector<std::string> earlier_errors;
};

// Receives a runner's events. It is called from the runner's own threads, possibly several at
// once, so it must be thread-safe; it should return quickly (push to a queue).
using ProcessEventSink = std::function<void(ProcessEvent)>;

struct StartedProcess {
  ProcessId id = 0;
  int pid = 0;  // the OS process id, for records and messages
};

// Implementations are thread-safe.
class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;

  // Checks that `program` names something this runner can start and returns the form to put in
  // ProcessSpec::program. A name without '/' is looked up in `search_path` (PATH's format).
  // InvalidArgument, naming the program and the fix, when it is missing or not executable.
  virtual Result<std::string> ResolveProgram(const std::string& program,
                                             const std::string& search_path) = 0;

  // Starts a process; does not wait for it. Every kMessage of the process is delivered to
  // `sink` before its kExited, and kExited exactly once. `sink` must stay callable until then
  // (or until the runner is destroyed).
  virtual Result<StartedProcess> Start(const ProcessSpec& spec, ProcessEventSink sink) = 0;

  // Sends `signal_number` to a process this runner started. A process that has already exited
  // is left alone and the call is ok: a runner never signals a process it did not start.
  virtual Status Signal(ProcessId id, int signal_number) = 0;

  // Whether SendLine works: whether a process this runner starts can be told things after its
  // start (a worker that waits, parked, for its next placement reads it from standard input).
  // A runner that cannot never gets a worker asked to wait: its workers exit after a stop.
  virtual bool CanSendLines() const { return false; }

  // Writes `line` (no newline in it, at most kMaxSentLine bytes) and a newline to the standard
  // input of a process this runner started, whole; it may wait a few seconds at most for the
  // process to read what does not fit the pipe. Another line may follow. Unavailable when the
  // process has exited or its input is closed (or the wait ran out); Aborted when this runner
  // cannot send at all (CanSendLines is false); InvalidArgument for a bad line.
  virtual Status SendLine(ProcessId id, const std::string& line) {
    (void)id;
    (void)line;
    return Status::Aborted("this launcher cannot send a line to a running process");
  }
};

}  // namespace mitra::launcher
