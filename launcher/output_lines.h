// Cutting a process's output stream into lines, and keeping its last lines and its error lines.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace mitra::launcher {

// Splits a byte stream that arrives in arbitrary chunks into lines. A line is cut at '\n'
// (a '\r' before it is dropped) or when it reaches `max_line_bytes`, so a process that never
// prints a newline cannot grow memory without bound. Not thread-safe.
class LineSplitter {
 public:
  using LineCallback = std::function<void(std::string_view line)>;

  // `max_line_bytes` must be at least 1.
  explicit LineSplitter(size_t max_line_bytes = 64 * 1024) : max_line_bytes_(max_line_bytes) {}

  // Calls `on_line` for every line `data` completes.
  void Feed(std::string_view data, const LineCallback& on_line);
  // At end of stream: calls `on_line` for a final line without '\n', if any.
  void Finish(const LineCallback& on_line);

 private:
  void Emit(const LineCallback& on_line);

  size_t max_line_bytes_;
  std::string partial_;
};

// Whether `line` reads like an error message: a C++ exception's `terminate called ...` and
// `what():`, a Python exception's `ValueError: ...` and `Traceback`, `error:`, `ERROR`, a
// logger's `[error]` or `[critical]`, `fatal`, a failed assertion, a crash's `Segmentation
// fault` or `Aborted`.
bool IsErrorLine(std::string_view line);

// The last `capacity` lines added and, from before them, the last `error_capacity` error lines
// (IsErrorLine): LibTorch's `what():` line is often followed by a stack trace longer than the
// tail. Not thread-safe.
class LineTail {
 public:
  explicit LineTail(size_t capacity, size_t error_capacity = 8)
      : capacity_(capacity), error_capacity_(error_capacity) {}
  void Add(std::string_view line);
  std::vector<std::string> Lines() const { return {lines_.begin(), lines_.end()}; }
  // Error lines that scrolled out of Lines(), oldest first.
  std::vector<std::string> EarlierErrors() const { return {errors_.begin(), errors_.end()}; }

 private:
  size_t capacity_;
  size_t error_capacity_;
  std::deque<std::string> lines_;
  std::deque<std::string> errors_;
};

}  // namespace mitra::launcher
