// Cutting a process's output stream into lines, and keeping its last lines.
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

// The last `capacity` lines added. Not thread-safe.
class LineTail {
 public:
  explicit LineTail(size_t capacity) : capacity_(capacity) {}
  void Add(std::string_view line);
  std::vector<std::string> Lines() const { return {lines_.begin(), lines_.end()}; }

 private:
  size_t capacity_;
  std::deque<std::string> lines_;
};

}  // namespace mitra::launcher
