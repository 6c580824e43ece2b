// PipelinePartitions: where every segment of the model lives when each pipeline (data-parallel
// replica) may cut the model differently (--partition 1,3/3,1).
//
// With one partition for all, the replicas of stage s hold the same segments and reduce their
// gradients over the stage's data-parallel group. With a partition per pipeline, a segment is
// held by one rank of every replica, but not by the same stage: segment k's gradients are
// reduced over the ranks that hold it, one per replica. Consecutive or not, the segments that
// the same ranks hold form one reduction group, so a job has at most as many groups as there
// are distinct holder sets (with one partition for all: the stages' groups).
//
// A pure function of the partitions, the layout and the stage map: every rank computes the same
// groups.
#pragma once

#include <string>
#include <vector>

#include "mitra/contract/stage_map.h"
#include "mitra/cutpoint/partition.h"
#include "mitra/planner/schedule.h"

namespace mitra::worker {

struct ReductionGroup {
  std::vector<int> ranks;     // the holder in each replica, by replica
  std::vector<int> segments;  // ascending
};

class PipelinePartitions {
 public:
  // `by_replica`: each replica's partition of `layout`'s virtual stages (same number of ranges).
  PipelinePartitions(std::vector<cutpoint::Partition> by_replica,
                     const planner::ChunkLayout& layout, contract::StageMap map);

  // Whether every replica cuts the model alike (the stages' groups reduce every gradient).
  bool Alike() const;
  const cutpoint::Partition& Of(int replica) const { return by_replica_.at(replica); }
  // The rank that holds `segment` in replica `replica`.
  int Holder(int segment, int replica) const;
  // The segments rank `rank` holds, chunk by chunk.
  std::vector<int> SegmentsOf(int rank) const;
  // The groups that reduce the segments of rank `rank`, by ascending first segment: the order in
  // which every rank creates its groups, so that each creation finds its members (the smallest
  // group still being created has every member at it).
  std::vector<ReductionGroup> GroupsOf(int rank) const;
  // "1,3/3,1", or one partition's counts when they are alike.
  std::string ToString() const;

 private:
  std::vector<cutpoint::Partition> by_replica_;
  planner::ChunkLayout layout_;
  contract::StageMap map_;
};

}  // namespace mitra::worker
