// LocalProcessRunner: runs processes on this machine (Boost.Process).
//
// Each process gets one pipe for stdout and stderr together and one watcher thread that
//   - appends every byte to the process's log file as it arrives,
//   - hands each `@mitra` line to the sink and keeps the last lines for the exit event,
//   - notices the exit (within `poll_interval_s`), reaps the process and reports kExited.
//
// Standard input is a pipe whose write end the runner keeps open for the process's life, for
// SendLine; the watcher closes it once the process has exited, before it reports kExited. A
// process that never reads its stdin is unaffected, but one that reads it to the end waits: its
// stdin is not /dev/null any more. (Workers read it only while parked, waiting for a placement.)
// A process is reaped only by its watcher, under a per-process lock that Signal also takes, so
// a pid is never signalled after it was reaped (and possibly reused).
//
// Children are started in their own process group, so a Ctrl-C in the terminal reaches the
// manager only, and with a parent-death signal (SIGKILL), so none outlives a manager that dies
// without cleaning up. Because Linux ties that signal to the thread that forked, Start must be
// called from a thread that lives as long as the children (the manager's main thread).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/file_system.h"
#include "launcher/process_runner.h"

namespace mitra::launcher {
namespace detail {
struct LocalChild;  // one started process: pid, reap lock, watcher thread
}  // namespace detail

struct LocalProcessRunnerOptions {
  size_t tail_lines = 20;        // lines kept for ProcessEvent::last_lines
  double poll_interval_s = 0.1;  // how often a quiet watcher checks whether its process exited
  double send_timeout_s = kSendLineTimeoutS;  // SendLine's wait for a process to read
};

class LocalProcessRunner : public ProcessRunner {
 public:
  // `fs` opens the log files; it must outlive the runner.
  explicit LocalProcessRunner(FileSystem* fs, LocalProcessRunnerOptions options = {});
  // Kills (SIGKILL) every process that is still running and joins the watcher threads: no
  // child outlives the runner. Blocks until they are reaped. Sinks may be called meanwhile.
  ~LocalProcessRunner() override;

  LocalProcessRunner(const LocalProcessRunner&) = delete;
  LocalProcessRunner& operator=(const LocalProcessRunner&) = delete;

  // Returns an absolute path to a regular, executable file.
  Result<std::string> ResolveProgram(const std::string& program,
                                     const std::string& search_path) override;
  Result<StartedProcess> Start(const ProcessSpec& spec, ProcessEventSink sink) override;
  Status Signal(ProcessId id, int signal_number) override;

  bool CanSendLines() const override { return true; }
  // Writes the line and its newline to the process's stdin pipe. What the pipe has no room for
  // is written as the process reads, for up to send_timeout_s; lines sent from several threads
  // to one process never interleave. Unavailable, naming the process, when it has exited, has
  // closed its stdin, or did not read in time. When the wait runs out after part of the line was
  // written, the runner closes the process's stdin, so that the cut line ends in EOF rather than
  // running into the next one: every later SendLine to it is Unavailable. Blocks up to
  // send_timeout_s. Never raises SIGPIPE in the manager, whatever its disposition: SIGPIPE is
  // blocked in the calling thread during the write, and one that the write raised is taken back.
  Status SendLine(ProcessId id, const std::string& line) override;

 private:
  FileSystem* fs_;
  LocalProcessRunnerOptions options_;
  // The child started as `id`; Internal when this runner started none.
  Result<detail::LocalChild*> FindChild(ProcessId id);

  std::mutex mu_;  // guards next_id_ and children_ (not the Child objects' contents)
  ProcessId next_id_ = 1;
  std::map<ProcessId, std::unique_ptr<detail::LocalChild>> children_;
};

}  // namespace mitra::launcher
