// SrunProcessRunner: runs processes on one node of a Slurm allocation, each as a job step of its
// own (`--launcher srun`), for clusters where SSH to the compute nodes is not allowed.
//
// Each process is a local `srun` (started by a LocalProcessRunner, so its output, log and exit
// come the usual way) that runs one task on the node:
//
//   srun --jobid=JOB --nodes=1 --ntasks=1 --nodelist=NODE --overlap --export=ALL --input=none
//        [--chdir=DIR] -- /bin/sh -c 'printf "@mitra {...srun_task...}"; exec "$@"' mitra-srun
//        env -i NAME=value... PROGRAM ARGS...
//
// `--overlap` lets the steps share the allocation's resources (every rank of a node, and the
// batch step that runs the manager). The task first reports its step (JOB.STEP) and its pid,
// then execs the program with exactly the spec's environment (`env -i`), so neither srun's nor
// the node's variables reach it. No shell sees the spec: the words after `exec "$@"` are
// arguments, not a script.
//
// Signals go to the step with `scancel --signal=N JOB.STEP`, which delivers exactly that signal
// to the task (SIGUSR1 to stop after a step, SIGTERM, SIGKILL), not through srun: srun turns a
// SIGTERM into a SIGKILL of its tasks. The exit is srun's, translated back to the task's (srun
// exits with 128 + N and prints `task 0: Killed` for a task killed by signal N). A node that
// fails ends the step and srun prints `Node failure on NODE`: that exit is reported as `lost`.
//
// Thread-safe. Start must be called from a thread that lives as long as the processes (the
// LocalProcessRunner's parent-death signal), like LocalProcessRunner::Start.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/process_runner.h"

namespace mitra::launcher {

struct SrunOptions {
  std::string job_id;  // the allocation the steps run in (SLURM_JOB_ID)
  std::string node;    // the Slurm node name the processes run on
  // The environment of srun and scancel themselves (the manager's, inside the allocation:
  // PATH, SLURM_CONF, ...). Not the processes': theirs is the spec's.
  std::map<std::string, std::string> environment;
  double start_timeout_s = 30;    // how long Start waits for the task to report its step
  double command_timeout_s = 10;  // scancel
};

// Runs a short command to its end (local_command.h's RunLocalCommand; a fake in tests).
using LocalCommandFunction = std::function<Result<CommandResult>(
    const std::vector<std::string>& argv, const std::map<std::string, std::string>& environment,
    double timeout_s)>;

// srun's arguments (after `srun`) that run `command` as one task on the options' node.
std::vector<std::string> SrunArguments(const SrunOptions& options,
                                       const std::string& working_directory,
                                       const std::vector<std::string>& command);

// The task's command for `spec`: the reporting shell, then `env -i` and the program.
// InvalidArgument for a variable name that is empty or holds '=' or a NUL, or a program with
// '=' (env would read it as a variable).
Result<std::vector<std::string>> SrunTaskCommand(const ProcessSpec& spec);

// What the task reports before it execs the program.
struct SrunTask {
  std::string step;  // "JOB.STEP", as scancel takes it
  int64_t pid = 0;   // on the node
};

// The report in a message (the text after `@mitra `); nullopt for any other message.
std::optional<SrunTask> ParseSrunTaskMessage(std::string_view message);

// The task's exit from srun's and srun's last lines of output: `lost` when srun reports a node
// failure or was itself killed; the task's signal when srun exited with 128 + N after a line
// `srun: error: NODE: task 0: <signal description>`; srun's exit code otherwise.
ExitStatus TaskExitFromSrun(const ExitStatus& srun, const std::vector<std::string>& last_lines);

namespace detail {
struct SrunStep;  // one started process: its report, whether it ended, its sink
}  // namespace detail

class SrunProcessRunner : public ProcessRunner {
 public:
  // `local` starts the srun processes and must outlive this runner.
  SrunProcessRunner(SrunOptions options, ProcessRunner* local, LocalCommandFunction command);
  ~SrunProcessRunner() override;

  SrunProcessRunner(const SrunProcessRunner&) = delete;
  SrunProcessRunner& operator=(const SrunProcessRunner&) = delete;

  // The program is checked here (the local runner's rules): on a cluster the nodes share the
  // path of the program with the machine of the manager.
  Result<std::string> ResolveProgram(const std::string& program,
                                     const std::string& search_path) override;

  // Returns once the task has reported its step and pid (the pid on the node). A step that ends
  // before, or that srun cannot create, returns Unavailable with srun's last lines and delivers
  // no event; no report within start_timeout_s returns Timeout (srun is asked to end the step).
  // Blocks up to start_timeout_s.
  Result<StartedProcess> Start(const ProcessSpec& spec, ProcessEventSink sink) override;

  // `scancel --signal=N JOB.STEP`; ok and nothing sent when the process has exited. Blocks up
  // to command_timeout_s.
  Status Signal(ProcessId id, int signal_number) override;

  // `srun ... true` on the node: Unavailable naming the node and srun's error when it fails or
  // takes longer than `timeout_s`.
  Status Check(double timeout_s);

  // Kills `pid` on the node (through a step of its own) if its environment holds
  // MITRA_RUN_DIR=`run_dir`; ok when it is gone or not such a worker.
  Status KillOrphan(int64_t pid, const std::string& run_dir);

  const std::string& node() const { return options_.node; }

 private:
  // The local path of srun, looked up once on the options' PATH.
  Result<std::string> Srun();

  const SrunOptions options_;
  ProcessRunner* local_;
  LocalCommandFunction command_;
  std::mutex mu_;     // guards srun_ and steps_
  std::string srun_;  // "" until looked up
  std::map<ProcessId, std::shared_ptr<detail::SrunStep>> steps_;
};

}  // namespace mitra::launcher
