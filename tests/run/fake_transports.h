// FakeTransports: a Transports fake (run/transports.h) that turns the manager's loop
// (run/run_loop.h) into a simulation on one thread and a ManualClock.
//
// Every machine of the list gets a ScriptedProcessRunner whose processes are simulated workers
// following docs/worker-contract.md: `ready` and a heartbeat after `ready_after_s`, then a
// heartbeat every `heartbeat_s` (with the step times of the steps since the previous one) and a
// training step every `step_s` (rank 0 prints `step`; every
// rank of a generation steps at the same instants, as the real ones do in lockstep); a
// `checkpoint` from rank 0 every MITRA_CHECKPOINT_EVERY steps; at MITRA_MAX_STEPS or after
// SIGUSR1, a checkpoint and `stopped` after the step, then exit 0; SIGTERM and SIGKILL end them
// at once. A test scripts the rest: a rank that crashes, hangs or says something, a machine that
// cannot be reached, fails its health check, fails to start processes or is lost.
//
// Time moves only when the loop waits for its next event (Attach): the clock jumps to the next
// scripted instant, so a run of simulated minutes takes milliseconds and never sleeps.
//
// Not thread-safe, except Check for machines the test has scripted (SetHealthy or
// SetReachable): Attach makes the loop run health checks inline, so that everything happens on
// the loop's thread; only `mitra run`'s first look at its machines runs in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "run/events.h"
#include "run/run_loop.h"
#include "run/transports.h"
#include "tests/launcher/scripted_process_runner.h"

namespace mitra::testing {

// How the simulated workers behave when nothing else is scripted.
struct FakeWorkerScript {
  double ready_after_s = 0.5;  // start -> `ready` and the first heartbeat
  double heartbeat_s = 1;      // between heartbeats; 0: none
  double step_s = 1;           // one training step
  double check_s = 0.1;        // how long a health check takes
  int rendezvous_port = 29400;  // what the loop's port picker answers
  // Whether each started process keeps its environment for Environments(). At thousands of
  // ranks they outweigh the manager (MITRA_STAGE_TO_RANK_MAP names every rank).
  bool keep_environments = true;
  // Every process of rank `fail_rank` (-1: none) exits with `fail_exit_code` `fail_after_s`
  // after its start, having printed `fail_lines`: a program that fails the same way at every
  // launch (before `ready` while fail_after_s < ready_after_s).
  int fail_rank = -1;
  double fail_after_s = 0.2;
  int fail_exit_code = 1;
  std::vector<std::string> fail_lines;
};

class FakeTransports : public run::Transports {
 public:
  // `clock` and `queue` (the loop's) must outlive the fake.
  FakeTransports(ManualClock* clock, run::EventQueue* queue, FakeWorkerScript script = {});
  ~FakeTransports() override;

  // Fills the seams of `options` so that the loop runs on this simulation: the next event comes
  // from the script (the clock jumps to it), health checks take `check_s` of simulated time,
  // the rendezvous port is fixed and the newest checkpoint is the one rank 0 last reported.
  void Attach(run::RunLoopOptions* options);

  // ---- Scripting --------------------------------------------------------------------------

  // How the simulated workers started from now on behave.
  void SetScript(FakeWorkerScript script) { script_ = std::move(script); }
  // Runs `action` when the clock reaches `time` (monotonic seconds), or after `delay_s`.
  // Actions due at the same time run in the order they were scheduled.
  void At(double time, std::function<void()> action);
  void After(double delay_s, std::function<void()> action);
  // Once the clock passes `time`, the loop is asked to stop (as by SIGTERM, then again, which
  // kills the workers) and timed_out() is true: a test that goes wrong still ends.
  void set_time_limit(double time) { time_limit_ = time; }

  // RunnerFor fails for the machine: none of its ranks can be started.
  void SetReachable(const std::string& address, bool reachable);
  // The machine's health check passes or fails.
  void SetHealthy(const std::string& address, bool healthy);
  // The machine's next `count` process starts fail.
  void FailStarts(const std::string& address, int count);
  // The connection to the machine is lost: each of its processes ends with `lost`, and its
  // health check fails until SetHealthy(address, true).
  void LoseMachine(const std::string& address);

  // The newest process of `rank` (the current generation's, while it runs) exits with
  // `exit_code` after printing `last_lines`.
  void Crash(int rank, int exit_code, std::vector<std::string> last_lines = {});
  // The newest process of `rank` stops doing anything (SIGSTOP): no record, no step; SIGUSR1
  // and SIGTERM have no effect, SIGKILL ends it.
  void Hang(int rank);
  // The newest process of `rank` prints `@mitra <json>`.
  void Say(int rank, const std::string& json);

  // Called for every signal sent to a simulated worker (after the fake has acted on it).
  std::function<void(const std::string& address, int rank, int signal_number)> on_signal;
  // Called for every line sent to a simulated worker that has not exited (after it was
  // recorded in its runner's Process::lines and in lines()).
  std::function<void(const std::string& address, int rank, const std::string& line)> on_line;
  // Whether the machines' runners can send lines (CanSendLines); true unless set. Applies to
  // runners created before and after.
  void SetCanSendLines(bool can);

  // ---- Inspection -------------------------------------------------------------------------

  bool timed_out() const { return timed_out_; }
  int64_t checkpoint_step() const { return checkpoint_step_; }
  int running() const;  // simulated processes that have not exited
  int started() const { return static_cast<int>(processes_.size()); }
  int checks() const { return checks_; }
  // Every (rank, signal) sent, in order.
  const std::vector<std::pair<int, int>>& signals() const { return signals_; }
  // Every (rank, line) sent to a simulated worker, in order.
  const std::vector<std::pair<int, std::string>>& lines() const { return lines_; }
  // The environment each started process got, in start order.
  std::vector<std::map<std::string, std::string>> Environments() const;
  // The runner of `address` (created on first use).
  ScriptedProcessRunner& RunnerOf(const std::string& address);

  // ---- Transports -------------------------------------------------------------------------

  Result<launcher::ProcessRunner*> RunnerFor(const manager::Machine& machine) override;
  Status Check(const manager::Machine& machine, double timeout_s) override;
  Status KillOrphan(const manager::Machine& machine, int64_t pid,
                    const std::string& run_dir) override;
  std::string WorkerAddress(const manager::Machine& machine) const override;

 private:
  struct Process;
  struct Host;
  struct Timer {
    double time = 0;
    uint64_t order = 0;
    std::function<void()> action;
    bool operator>(const Timer& other) const {
      return time != other.time ? time > other.time : order > other.order;
    }
  };

  std::optional<run::Event> NextEvent(double wait_s);
  Host& HostOf(const std::string& address);
  Process* Newest(int rank);
  void OnStart(Host& host, int index);
  void OnSignal(Host& host, int index, int signal_number);
  void OnLine(Host& host, int index, const std::string& line);
  void Ready(Process& p);
  void Heartbeat(Process& p);
  void Step(Process& p);
  void Say(Process& p, const std::string& json);
  void End(Process& p, launcher::ExitStatus exit, std::vector<std::string> last_lines = {});

  ManualClock* clock_;
  run::EventQueue* queue_;
  FakeWorkerScript script_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  uint64_t next_order_ = 0;
  double time_limit_ = 1e18;
  bool timed_out_ = false;
  std::map<std::string, std::unique_ptr<Host>> hosts_;
  std::vector<std::unique_ptr<Process>> processes_;  // in start order
  int64_t checkpoint_step_ = 0;
  int checks_ = 0;
  std::mutex check_mu_;
  std::vector<std::pair<int, int>> signals_;
  std::vector<std::pair<int, std::string>> lines_;
  bool can_send_lines_ = true;
};

}  // namespace mitra::testing
