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

Result<Partition> Explicit(const std::vector<int>& counts, int num_segments, int num_stages) {
  Partition p{counts};
  const std::string list = p.ToString();
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
  if (std::any_of(p.counts.begin(), p.counts.end(), [](int n) { return n < 1; })) {
    return Status::InvalidArgument("partition '" + list + "' leaves a stage empty: every count "
                                   "must be at least 1");
  }
  return p;
}

}  // namespace

namespace {

// "1,4,4,3": one pipeline's counts; `whole` is the text the user gave, for the message.
Result<std::vector<int>> ParseCounts(const std::string& text, const std::string& whole) {
  std::vector<int> counts;
  for (size_t pos = 0;;) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos ||
        item.size() > 6) {
      return Status::InvalidArgument("partition '" + whole + "': '" + item +
                                     "' is not a segment count (expected e.g. 1,4,4,3)");
    }
    counts.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return counts;
}

}  // namespace

Result<PartitionMethod> ParsePartitionMethod(const std::string& text) {
  if (text == "uniform") return PartitionMethod{};
  if (text == "params") return PartitionMethod{PartitionMethod::Kind::kParams, {}, {}};
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) {
    return Status::InvalidArgument("unknown partition method '" + text +
                                   "' (expected uniform, params, counts like 1,4,4,3, or "
                                   "counts per pipeline like 1,3/3,1)");
  }
  if (text.find('/') == std::string::npos) {
    Result<std::vector<int>> counts = ParseCounts(text, text);
    if (!counts.ok()) return counts.status();
    return PartitionMethod{PartitionMethod::Kind::kExplicit, *counts, {}};
  }
  PartitionMethod method{PartitionMethod::Kind::kPerPipeline, {}, {}};
  for (size_t pos = 0;;) {
    const size_t slash = text.find('/', pos);
    Result<std::vector<int>> counts = ParseCounts(
        text.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos), text);
    if (!counts.ok()) return counts.status();
    method.pipelines.push_back(*counts);
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return method;
}

Result<PartitionMethod> PipelineMethod(const PartitionMethod& method, int replica, int replicas) {
  if (method.kind != PartitionMethod::Kind::kPerPipeline) return method;
  const int given = static_cast<int>(method.pipelines.size());
  if (given != replicas) {
    return Status::InvalidArgument(
        "partition '" + PartitionMethodName(method) + "' gives " + std::to_string(given) +
        " pipelines' counts and the job has " + std::to_string(replicas) +
        " data-parallel replicas: give one list of counts per replica, '/' between them");
  }
  return PartitionMethod{PartitionMethod::Kind::kExplicit, method.pipelines.at(replica), {}};
}

std::string PartitionMethodName(const PartitionMethod& method) {
  switch (method.kind) {
    case PartitionMethod::Kind::kUniform: return "uniform";
    case PartitionMethod::Kind::kParams: return "params";
    case PartitionMethod::Kind::kExplicit: return Partition{method.counts}.ToString();
    case PartitionMethod::Kind::kPerPipeline: {
      std::string text;
      for (const std::vector<int>& counts : method.pipelines) {
        text += (text.empty() ? "" : "/") + Partition{counts}.ToString();
      }
      return text;
    }
  }
  return "?";
}

Result<Partition> MakePartition(const PartitionMethod& method, int num_segments, int num_stages,
                                const std::vector<int64_t>& segment_params) {
  if (num_stages < 1) return Status::InvalidArgument("the number of stages must be at least 1");
  if (num_stages > num_segments) {
    return Status::InvalidArgument(
        std::to_string(num_stages) + " pipeline stages but the model has only " +
        std::to_string(num_segments) + " segments: use at most " + std::to_string(num_segments) +
        " stages or add CutPoints");
  }
  switch (method.kind) {
    case PartitionMethod::Kind::kUniform:
      return Uniform(num_segments, num_stages);
    case PartitionMethod::Kind::kParams:
      if (static_cast<int>(segment_params.size()) != num_segments) {
        return Status::Internal("partition 'params' needs the parameter count of every segment");
      }
      return ByParams(segment_params, num_stages);
    case PartitionMethod::Kind::kExplicit:
      break;
    case PartitionMethod::Kind::kPerPipeline:
      return Status::Internal("partition '" + PartitionMethodName(method) +
                              "' gives each pipeline its own counts: take one with PipelineMethod");
  }
  return Explicit(method.counts, num_segments, num_stages);
}

Result<Partition> MakePartition(const std::string& method, int num_segments, int num_stages,
                                const std::vector<int64_t>& segment_params) {
  Result<PartitionMethod> parsed = ParsePartitionMethod(method);
  if (!parsed.ok()) return parsed.status();
  return MakePartition(*parsed, num_segments, num_stages, segment_params);
}

}  // namespace mitra::cutpoint
