#include "launcher/output_lines.h"

namespace mitra::launcher {

void LineSplitter::Feed(std::string_view data, const LineCallback& on_line) {
  while (!data.empty()) {
    const size_t room = max_line_bytes_ - partial_.size();
    const size_t newline = data.substr(0, room).find('\n');
    if (newline != std::string_view::npos) {
      partial_.append(data.data(), newline);
      data.remove_prefix(newline + 1);
      Emit(on_line);
      continue;
    }
    const size_t take = std::min(room, data.size());
    partial_.append(data.data(), take);
    data.remove_prefix(take);
    if (partial_.size() == max_line_bytes_) Emit(on_line);
  }
}

void LineSplitter::Finish(const LineCallback& on_line) {
  if (!partial_.empty()) Emit(on_line);
}

void LineSplitter::Emit(const LineCallback& on_line) {
  if (!partial_.empty() && partial_.back() == '\r') partial_.pop_back();
  on_line(partial_);
  partial_.clear();
}

bool IsErrorLine(std::string_view line) {
  static constexpr std::string_view kMarks[] = {
      "terminate called", "what():", "Error:", "error:", "ERROR", "[error]", "[critical]",
      "Traceback (most recent call last)", "Exception", "fatal", "Fatal", "FATAL",
      "Assertion", "assertion", "Segmentation fault", "Aborted"};
  for (const std::string_view mark : kMarks) {
    for (size_t at = line.find(mark); at != std::string_view::npos; at = line.find(mark, at + 1)) {
      // `Error:` but not a C++ name's `Error::` (LibTorch's stack frames are full of them).
      const size_t end = at + mark.size();
      if (mark.back() == ':' && end < line.size() && line[end] == ':') continue;
      return true;
    }
  }
  return false;
}

void LineTail::Add(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) {
    if (error_capacity_ > 0 && IsErrorLine(lines_.front())) {
      if (errors_.size() == error_capacity_) errors_.pop_front();
      errors_.push_back(std::move(lines_.front()));
    }
    lines_.pop_front();
  }
  lines_.emplace_back(line);
}

}  // namespace mitra::launcher
