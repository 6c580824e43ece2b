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

void LineTail::Add(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.emplace_back(line);
}

}  // namespace mitra::launcher
