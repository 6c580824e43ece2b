#include "worker/step/pipeline_partitions.h"

#include <algorithm>
#include <map>

namespace mitra::worker {

PipelinePartitions::PipelinePartitions(std::vector<cutpoint::Partition> by_replica,
                                       const planner::ChunkLayout& layout, contract::StageMap map)
    : by_replica_(std::move(by_replica)), layout_(layout), map_(std::move(map)) {}

bool PipelinePartitions::Alike() const {
  return std::all_of(by_replica_.begin(), by_replica_.end(), [&](const cutpoint::Partition& p) {
    return p.counts == by_replica_.front().counts;
  });
}

int PipelinePartitions::Holder(int segment, int replica) const {
  const int virtual_stage = Of(replica).StageOf(segment);
  return map_.RankOf(layout_.StageOf(virtual_stage), replica);
}

std::vector<int> PipelinePartitions::SegmentsOf(int rank) const {
  const contract::GridPosition at = map_.PositionOf(rank);
  const cutpoint::Partition& partition = Of(at.replica);
  std::vector<int> segments;
  for (int c = 0; c < layout_.chunks; ++c) {
    const int j = layout_.VirtualStage(at.stage, c);
    for (int i = partition.FirstSegment(j); i < partition.EndSegment(j); ++i) segments.push_back(i);
  }
  return segments;
}

std::vector<ReductionGroup> PipelinePartitions::GroupsOf(int rank) const {
  std::vector<int> segments = SegmentsOf(rank);
  std::sort(segments.begin(), segments.end());
  std::map<std::vector<int>, std::vector<int>> by_holders;  // holders -> segments
  for (int segment : segments) {
    std::vector<int> holders;
    for (int d = 0; d < static_cast<int>(by_replica_.size()); ++d) {
      holders.push_back(Holder(segment, d));
    }
    by_holders[holders].push_back(segment);
  }
  std::vector<ReductionGroup> groups;
  for (auto& [ranks, held] : by_holders) groups.push_back({ranks, std::move(held)});
  std::sort(groups.begin(), groups.end(), [](const ReductionGroup& a, const ReductionGroup& b) {
    return a.segments.front() < b.segments.front();
  });
  return groups;
}

std::string PipelinePartitions::ToString() const {
  if (Alike()) return by_replica_.front().ToString();
  std::string text;
  for (const cutpoint::Partition& p : by_replica_) text += (text.empty() ? "" : "/") + p.ToString();
  return text;
}

}  // namespace mitra::worker
