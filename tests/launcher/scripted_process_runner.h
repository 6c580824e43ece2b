// ScriptedProcessRunner: a ProcessRunner fake for unit tests of the manager. It starts
// nothing; it records what it was asked (specs, signals, lines sent) and lets the test script
// what the "processes" do, by delivering messages and exits through the sinks it was given,
// either directly or from the on_start / on_signal / on_line hooks. Single-threaded: hooks run
// inside the call.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/process_runner.h"

namespace mitra::testing {

class ScriptedProcessRunner : public launcher::ProcessRunner {
 public:
  struct Process {
    launcher::ProcessSpec spec;
    launcher::ProcessEventSink sink;
    int pid = 0;
    bool exited = false;
    std::vector<std::string> lines;  // every line SendLine delivered, in order, no newline
  };

  // Called after the index-th Start succeeded (index = launcher::ProcessId - 1).
  std::function<void(ScriptedProcessRunner&, int index)> on_start;
  // Called for every Signal to a process that has not exited.
  std::function<void(ScriptedProcessRunner&, int index, int signal_number)> on_signal;
  // Called for every line delivered to a process that has not exited (after it was recorded).
  std::function<void(ScriptedProcessRunner&, int index, const std::string& line)> on_line;
  // CanSendLines(); false makes SendLine fail with Aborted, as a runner that cannot send does.
  bool can_send_lines = true;
  // Start number `fail_start_at` (0-based) fails with Unavailable; -1: never.
  int fail_start_at = -1;
  // The next `fail_starts` Starts fail with Unavailable (each failure counts one down).
  int fail_starts = 0;

  std::vector<Process> processes;
  std::vector<std::pair<int, int>> signals;  // (index, signal) in order

  Result<std::string> ResolveProgram(const std::string& program, const std::string&) override {
    return program;
  }

  Result<launcher::StartedProcess> Start(const launcher::ProcessSpec& spec,
                                         launcher::ProcessEventSink sink) override {
    if (static_cast<int>(processes.size()) == fail_start_at || fail_starts > 0) {
      if (fail_starts > 0) --fail_starts;
      return Status::Unavailable("cannot start '" + spec.program + "': scripted failure");
    }
    processes.push_back(
        Process{spec, std::move(sink), 1000 + static_cast<int>(processes.size()), false, {}});
    const int index = static_cast<int>(processes.size()) - 1;
    if (on_start) on_start(*this, index);
    return launcher::StartedProcess{index + 1, processes[index].pid};
  }

  Status Signal(launcher::ProcessId id, int signal_number) override {
    const int index = static_cast<int>(id) - 1;
    if (processes.at(index).exited) return Status::Ok();
    signals.emplace_back(index, signal_number);
    if (on_signal) on_signal(*this, index, signal_number);
    return Status::Ok();
  }

  bool CanSendLines() const override { return can_send_lines; }

  // InvalidArgument for a bad line, Aborted unless can_send_lines, Unavailable once the
  // process has exited; otherwise records the line and calls on_line.
  Status SendLine(launcher::ProcessId id, const std::string& line) override {
    if (Status status = launcher::CheckSentLine(line); !status.ok()) return status;
    if (!can_send_lines) return ProcessRunner::SendLine(id, line);
    const int index = static_cast<int>(id) - 1;
    Process& p = processes.at(index);
    if (p.exited) {
      return Status::Unavailable("cannot send a line to process " + std::to_string(id) +
                                 ": it has exited");
    }
    p.lines.push_back(line);
    if (on_line) on_line(*this, index, line);
    return Status::Ok();
  }

  // Delivers `@mitra <json>` from process `index`.
  void Message(int index, const std::string& json) {
    launcher::ProcessEvent e;
    e.id = index + 1;
    e.message = json;
    processes.at(index).sink(std::move(e));
  }

  // Delivers the exit of process `index`: exit code `code`, or killed by `signal_number`.
  void Exit(int index, int code, int signal_number = 0, std::vector<std::string> last = {}) {
    launcher::ExitStatus exit;
    exit.exit_code = code;
    exit.signal = signal_number;
    End(index, exit, std::move(last));
  }

  // Delivers the end of process `index` as `exit` says (`lost`: its host was lost). Once.
  void End(int index, launcher::ExitStatus exit, std::vector<std::string> last = {}) {
    Process& p = processes.at(index);
    if (p.exited) return;
    p.exited = true;
    launcher::ProcessEvent e;
    e.kind = launcher::ProcessEvent::Kind::kExited;
    e.id = index + 1;
    e.exit = exit;
    e.last_lines = std::move(last);
    p.sink(std::move(e));
  }

  int SignalCount(int signal_number) const {
    int n = 0;
    for (const auto& [index, s] : signals) n += s == signal_number ? 1 : 0;
    return n;
  }
};

}  // namespace mitra::testing
