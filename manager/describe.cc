#include "manager/describe.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "common/blocking_queue.h"
#include "common/json.h"

namespace mitra::manager {
namespace {

using launcher::ProcessEvent;

constexpr double kKillWaitS = 5;  // after SIGKILL, how long to wait for the exit event

std::string Quote(const std::vector<std::string>& lines) {
  if (lines.empty()) return " It printed nothing.";
  std::string out = " Its last output:";
  for (const std::string& line : lines) out += "\n  | " + line;
  return out;
}

// Waits for the next event until `deadline_s` (monotonic); nullopt on timeout.
std::optional<ProcessEvent> Next(BlockingQueue<ProcessEvent>& queue, Clock& clock,
                                 double deadline_s) {
  const double wait_s = std::max(0.0, deadline_s - clock.MonotonicSeconds());
  return queue.PopFor(std::chrono::duration<double>(wait_s));
}

}  // namespace

Result<ProgramDescription> DescribeProgram(launcher::ProcessRunner& runner,
                                           const launcher::ProcessSpec& spec, Clock& clock,
                                           double timeout_s) {
  // Shared with the sink: the runner may still deliver after this function returns.
  auto queue = std::make_shared<BlockingQueue<ProcessEvent>>();
  Result<launcher::StartedProcess> started =
      runner.Start(spec, [queue](ProcessEvent event) { queue->Push(std::move(event)); });
  if (!started.ok()) {
    return Status::InvalidArgument("cannot run '" + spec.program +
                                   "' to ask for its shape: " + started.status().message());
  }
  const std::string asked = "'" + spec.program + "' with MITRA_DESCRIBE=1";
  std::optional<JsonObject> record;
  std::string record_error;
  const double deadline_s = clock.MonotonicSeconds() + timeout_s;
  std::optional<ProcessEvent> exit;
  while (!exit) {
    std::optional<ProcessEvent> event = Next(*queue, clock, deadline_s);
    if (!event) {
      (void)runner.Signal(started->id, SIGKILL);
      const double kill_deadline_s = clock.MonotonicSeconds() + kKillWaitS;
      std::optional<ProcessEvent> killed;
      while ((killed = Next(*queue, clock, kill_deadline_s)) &&
             killed->kind != ProcessEvent::Kind::kExited) {
      }
      return Status::InvalidArgument(
          asked + " did not exit within " + std::to_string(std::lround(timeout_s)) +
          " s; a mitra program prints its describe record and exits at once in that mode." +
          Quote(killed ? killed->last_lines : std::vector<std::string>{}));
    }
    if (event->kind == ProcessEvent::Kind::kExited) {
      exit = std::move(event);
      continue;
    }
    Result<JsonObject> parsed = JsonObject::Parse(event->message);
    if (!parsed.ok()) {
      record_error = "a malformed @mitra line (" + parsed.status().message() + ")";
    } else if (parsed->GetString("event") == "describe") {
      record = std::move(parsed).value();
    }
  }
  if (!exit->exit.ok()) {
    return Status::InvalidArgument(asked + " " + exit->exit.ToString() +
                                   "; check the program and its arguments (run it by hand "
                                   "with MITRA_DESCRIBE=1 to see the problem)." +
                                   Quote(exit->last_lines));
  }
  if (!record) {
    return Status::InvalidArgument(
        asked + " printed " +
        (record_error.empty() ? "no `@mitra {\"event\":\"describe\",...}` line" : record_error) +
        "; is it a program built on mitra::worker?" + Quote(exit->last_lines));
  }
  const std::optional<double> segments = record->GetNumber("segments");
  if (!segments || *segments < 1 || *segments != std::floor(*segments) || *segments > 1e6) {
    return Status::InvalidArgument(asked +
                                   " printed a describe record without a valid "
                                   "\"segments\" count (a whole number >= 1): " +
                                   record->ToJson());
  }
  ProgramDescription description;
  description.segments = static_cast<int>(*segments);
  description.tokens_per_sample = record->GetNumber("tokens_per_sample").value_or(0);
  return description;
}

}  // namespace mitra::manager
