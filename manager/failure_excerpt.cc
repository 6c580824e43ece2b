#include "manager/failure_excerpt.h"

#include <cctype>
#include <string_view>
#include <variant>

#include "contract/worker_messages.h"
#include "common/strings.h"
#include "launcher/output_lines.h"
#include "launcher/process_runner.h"

namespace mitra::manager {
namespace {

// A heartbeat or `starting` record: a sign of life, nothing a failure report quotes.
bool IsLifeSign(std::string_view line) {
  if (!StartsWith(line, contract::kMessagePrefix)) return false;
  line.remove_prefix(contract::kMessagePrefix.size());
  const Result<contract::ReadMessage> read = contract::ParseWorkerMessage(line);
  return read.ok() && (std::holds_alternative<contract::message::Heartbeat>(read->message) ||
                       std::holds_alternative<contract::message::Starting>(read->message));
}

// "[2025-01-01 12:00:00.123] [error] rank 0: bad" -> "rank 0: bad": a logger's brackets say
// when and how loud, not what.
std::string WithoutLoggerPrefix(std::string_view line) {
  for (;;) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) return "";
    line.remove_prefix(start);
    if (line.front() != '[') break;
    const size_t close = line.find(']');
    if (close == std::string_view::npos) break;
    line.remove_prefix(close + 1);
  }
  return std::string(line);
}

std::string WithoutNumbers(const std::string& line) {
  std::string out;
  for (const char c : line) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> FailureExcerpt::ErrorLines() const {
  std::vector<std::string> errors = earlier_errors;
  for (const std::string& line : tail) {
    if (launcher::IsErrorLine(line)) errors.push_back(line);
  }
  return errors;
}

std::string FailureExcerpt::Message() const {
  const std::vector<std::string> errors = ErrorLines();
  // A C++ exception's message follows `what():`; the lines around it only say it was thrown.
  for (const std::string& line : errors) {
    const size_t what = line.find("what():");
    if (what != std::string::npos) return WithoutLoggerPrefix(line.substr(what + 7));
  }
  // A Python traceback ends with the exception; a logger's error line is the message.
  if (!errors.empty()) return WithoutLoggerPrefix(errors.back());
  for (auto it = tail.rbegin(); it != tail.rend(); ++it) {
    std::string message = WithoutLoggerPrefix(*it);
    if (!message.empty()) return message;
  }
  return "";
}

std::string FailureExcerpt::Key() const {
  std::vector<std::string> errors = ErrorLines();
  if (errors.empty() && !tail.empty()) errors.push_back(tail.back());
  for (std::string& line : errors) line = WithoutNumbers(line);
  return Join(errors, "\n");
}

FailureExcerpt ExcerptOf(std::vector<std::string> earlier_errors,
                         const std::vector<std::string>& last_lines) {
  FailureExcerpt excerpt;
  excerpt.earlier_errors = std::move(earlier_errors);
  for (const std::string& line : last_lines) {
    if (!IsLifeSign(line)) excerpt.tail.push_back(line);
  }
  return excerpt;
}

std::string FailureExcerpt::Hint() const {
  for (const std::string& line : ErrorLines()) {
    if (line.find("No module named 'mitra'") != std::string::npos) {
      return "the workers' Python cannot import mitra: run scripts/setup as root (it installs "
             "the package for /usr/bin/python3), or `pip install .` into the Python the workers "
             "run, or give them the build's copy with --env PYTHONPATH=BUILD/python";
    }
    if (line.find("No module named 'torch'") != std::string::npos) {
      return "the workers' Python has no torch: start them with /usr/bin/python3 (Debian's "
             "python3-torch), or install torch 1.13 into the Python they run";
    }
  }
  return "";
}

std::string FormatFailureReport(const std::string& what, const std::string& log_name,
                                const FailureExcerpt& excerpt, bool same_as_before) {
  std::string report = "mitra: " + what + "\n";
  if (excerpt.empty()) return report;
  if (same_as_before) {
    return report + "mitra: the same error lines as the failure before (in " + log_name + ")\n";
  }
  const size_t n = excerpt.tail.size();
  const std::string last = n == 1 ? "last line" : "last " + std::to_string(n) + " lines";
  if (excerpt.earlier_errors.empty()) {
    report += "mitra: " + last + " of " + log_name + ":\n";
  } else {
    report += "mitra: error lines and the " + last + " of " + log_name + ":\n";
    for (const std::string& line : excerpt.earlier_errors) report += "  | " + line + "\n";
    report += "  | ...\n";
  }
  for (const std::string& line : excerpt.tail) report += "  | " + line + "\n";
  if (const std::string hint = excerpt.Hint(); !hint.empty()) {
    report += "mitra: hint: " + hint + "\n";
  }
  return report;
}

}  // namespace mitra::manager
