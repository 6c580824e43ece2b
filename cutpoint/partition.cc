#include "mitra/cutpoint/partition.h"

#include <algorithm>
#include <cctype>
#include <numeric>

namespace mitra::cutpoint {

int Partition::FirstSegment(int stage) const {
  return std::accumulate(counts.begin(), counts.begin() + stage, 0);
}

int Partition::EndSegment(int stage) const { return FirstSegment(stage) + counts.at(stage); }

int Partition::StageOf(int segment) const {
  for (int s = 0, end = 0; s < num_stages(); ++s) {
    end += counts[s];
    if (segment < end) return s;
  }
  return -1;
}

std::string Partition::ToString() const {
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) out += (i ? "," : "") + std::to_string(counts[i]);
  return out;
}

namespace {

Partition Uniform(int num_segments, int num_stages) {
  Partition p;
  for (int s = 0; s < num_stages; ++s) {
    p.counts.push_back(num_segments / num_stages + (s < num_segments % num_stages ? 1 : 0));
  }
  return p;
}

// The smallest cap such that the segments fit into `num_stages` contiguous groups whose sums
// stay under it, found by binary search; then the greedy split that achieves it, keeping at least
// one segment for every remaining stage.
Partition ByParams(const std::vector<int64_t>& params, int num_stages) {
  const int n = static_cast<int>(params.size());
  auto fits = [&](int64_t cap) {
    int stages = 1;
    int64_t sum = 0;
    for (int64_t w : params) {
      if (w > cap) return false;
      if (sum + w > cap) {
        ++stages;
        sum = 0;
      }
      sum += w;
    }
    return stages <= num_stages;
  };
  int64_t lo = *std::max_element(params.begin(), params.end());
  int64_t hi = std::accumulate(params.begin(), params.end(), int64_t{0});
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) hi = mid; else lo = mid + 1;
  }
  Partition p;
  int i = 0;
  for (int s = 0; s < num_stages; ++s) {
    int remaining_stages = num_stages - s - 1;
    int count = 0;
    int64_t sum = 0;
    while (i < n - remaining_stages && (count == 0 || sum + params[i] <= lo)) {
      sum += params[i++];
      ++count;
    }
    p.counts.push_back(count);
  }
  p.counts.back() += n - i;  // unreachable by construction, kept for safety of the sum
  return p;
}

Result<Partition> Explicit(const std::string& list, int num_segments, int num_stages) {
  Partition p;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos ||
        item.size() > 6) {
      return Status::InvalidArgument("partition '" + list + "': '" + item +
                                     "' is not a segment count (expected e.g. 1,4,4,3)");
    }
    p.counts.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (p.num_stages() != num_stages) {
    return Status::InvalidArgument("partition '" + list + "' has " +
                                   std::to_string(p.num_stages()) + " stages but the job has " +
                                   std::to_string(num_stages) + ": give one count per stage");
  }
  int sum = std::accumulate(p.counts.begin(), p.counts.end(), 0);
  if (sum != num_segments) {
    return Status::InvalidArgument("partition '" + list + "' covers " + std::to_string(sum) +
                                   " segments but the model has " + std::to_string(num_segments) +
                                   ": the counts must add up to it");
  }
  if (std::count(p.counts.begin(), p.counts.end(), 0) > 0) {
    return Status::InvalidArgument("partition '" + list + "' leaves a stage empty: every count "
                                   "must be at least 1");
  }
  return p;
}

}  // namespace

Result<Partition> MakePartition(const std::string& method, int num_segments, int num_stages,
                                const std::vector<int64_t>& segment_params) {
  if (num_stages < 1) return Status::InvalidArgument("the number of stages must be at least 1");
  if (num_stages > num_segments) {
    return Status::InvalidArgument(
        std::to_string(num_stages) + " pipeline stages but the model has only " +
        std::to_string(num_segments) + " segments: use at most " + std::to_string(num_segments) +
        " stages or add CutPoints");
  }
  if (method == "uniform") return Uniform(num_segments, num_stages);
  if (method == "params") {
    if (static_cast<int>(segment_params.size()) != num_segments) {
      return Status::Internal("partition 'params' needs the parameter count of every segment");
    }
    return ByParams(segment_params, num_stages);
  }
  if (!method.empty() && std::isdigit(static_cast<unsigned char>(method[0]))) {
    return Explicit(method, num_segments, num_stages);
  }
  return Status::InvalidArgument("unknown partition method '" + method +
                                 "' (expected uniform, params, or counts like 1,4,4,3)");
}

}  // namespace mitra::cutpoint
