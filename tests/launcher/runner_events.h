// Helpers shared by the process runners' tests (local and SSH): a shell-script ProcessSpec, and
// a queue of the events a runner delivers with the waits the tests need.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/blocking_queue.h"
#include "launcher/process_runner.h"

namespace mitra::testing {

using launcher::ProcessEvent;
using launcher::ProcessEventSink;
using launcher::ProcessSpec;

// /bin/sh -c `script`, with PATH=/usr/bin:/bin and GREETING=hello, output to `log_path`.
inline ProcessSpec ShellSpec(const std::string& script, const std::string& log_path) {
  ProcessSpec spec;
  spec.program = "/bin/sh";
  spec.args = {"-c", script};
  spec.environment = {{"PATH", "/usr/bin:/bin"}, {"GREETING", "hello"}};
  spec.log_path = log_path;
  return spec;
}

// A shell script that reads a line from stdin and answers `@mitra {"got":"LINE"}`, `count`
// times, then exits 0.
inline std::string EchoLinesScript(int count) {
  std::string script;
  for (int i = 0; i < count; ++i) script += R"(read -r a; echo "@mitra {\"got\":\"$a\"}"; )";
  return script;
}

class RunnerEvents {
 public:
  ProcessEventSink Sink() {
    return [this](ProcessEvent e) { queue_.Push(std::move(e)); };
  }

  // Events until the next exit (at most `timeout_s`); the exit is the last element.
  std::vector<ProcessEvent> UntilExit(double timeout_s = 10) {
    std::vector<ProcessEvent> seen;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (std::optional<ProcessEvent> e =
               queue_.PopFor(deadline - std::chrono::steady_clock::now())) {
      seen.push_back(std::move(*e));
      if (seen.back().kind == ProcessEvent::Kind::kExited) break;
    }
    return seen;
  }

  // Waits for the message `text`; false after `timeout_s`.
  bool WaitForMessage(const std::string& text, double timeout_s = 10) {
    while (std::optional<ProcessEvent> e = queue_.PopFor(
               std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)))) {
      if (e->kind == ProcessEvent::Kind::kMessage && e->message == text) return true;
    }
    return false;
  }

  // Whether nothing arrives within `timeout_s`.
  bool QuietFor(double timeout_s) {
    return !queue_.PopFor(std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)))
                .has_value();
  }

 private:
  BlockingQueue<ProcessEvent> queue_;
};

}  // namespace mitra::testing
