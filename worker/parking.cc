#include "worker/parking.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "contract/park.h"
#include "worker/comm/report.h"

namespace mitra::worker {
namespace {

enum class LineResult { kLine, kEnd, kTimeout };

// Reads up to the next newline of `fd` into `line` (without it), waiting at most until
// `deadline`. Bytes after the newline are not read: only one line is ever pending.
LineResult ReadLine(int fd, std::chrono::steady_clock::time_point deadline, std::string* line) {
  line->clear();
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return LineResult::kTimeout;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;  // a stop signal while parked changes nothing
    if (ready < 0) return LineResult::kEnd;
    if (ready == 0) continue;
    char c = 0;
    const ssize_t n = ::read(fd, &c, 1);  // byte by byte: a line is read once per morph
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return LineResult::kEnd;
    if (c == '\n') return LineResult::kLine;
    line->push_back(c);
  }
}

}  // namespace

Result<std::optional<Placement>> AwaitPlacement(int fd, int rank, int64_t step, double timeout_s,
                                                const ParkedHolding& holding) {
  contract::message::Parked parked;
  parked.rank = rank;
  parked.step = step;
  if (holding.step >= 0) {
    parked.held_step = holding.step;
    parked.held_first_segment = holding.first;
    parked.held_end_segment = holding.end;
    parked.held_bytes = holding.bytes;
  }
  Emit(parked);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  std::string line;
  switch (ReadLine(fd, deadline, &line)) {
    case LineResult::kEnd:
      return std::optional<Placement>();
    case LineResult::kTimeout:
      spdlog::warn("rank {}: parked for {:.0f} s without a placement; exiting", rank, timeout_s);
      return std::optional<Placement>();
    case LineResult::kLine:
      break;
  }
  Result<contract::ParkOrder> order = contract::ParseParkLine(line);
  if (!order.ok()) return order.status();
  if (!order->placement) return std::optional<Placement>();
  Result<Placement> next = Placement::FromEnvironment(*order->placement);
  if (!next.ok()) return next.status();
  return std::optional<Placement>(std::move(*next));
}

}  // namespace mitra::worker
