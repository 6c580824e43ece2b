// Partitions: which consecutive segments each pipeline stage holds.
//
// A partition is a list of segment counts, one per stage, summing to the number of segments,
// every count at least 1 (e.g. {1, 4, 4, 3}: stage 0 holds segment 0, stage 1 segments 1-4...).
// Methods:
//   uniform   counts differ by at most one; earlier stages take the extra segments
//   params    contiguous split minimising the largest per-stage parameter count
//   1,4,4,3   explicit counts (non-uniform allowed)
//   1,3/3,1   explicit counts per pipeline (data-parallel replica), '/' between them: each
//             pipeline cuts the model where its machines are balanced, and the ranks that
//             hold a segment in the replicas reduce its gradients together
//             (worker/step/pipeline_partitions.h)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::cutpoint {

struct Partition {
  std::vector<int> counts;  // segments per stage

  int num_stages() const { return static_cast<int>(counts.size()); }
  int FirstSegment(int stage) const;  // index of the stage's first segment
  int EndSegment(int stage) const;    // one past its last segment
  int StageOf(int segment) const;     // the stage holding a segment
  std::string ToString() const;       // "1,4,4,3"
};

// How to partition, as a program or the planner asks for it: a method, and for kExplicit the
// counts themselves (checked against the model and the job by MakePartition).
struct PartitionMethod {
  enum class Kind { kUniform, kParams, kExplicit, kPerPipeline };
  Kind kind = Kind::kUniform;
  std::vector<int> counts;                 // kExplicit only
  std::vector<std::vector<int>> pipelines;  // kPerPipeline only: each replica's counts

  bool operator==(const PartitionMethod& o) const {
    return kind == o.kind && counts == o.counts && pipelines == o.pipelines;
  }
};

// "uniform" | "params" | whole numbers separated by commas ("1,4,4,3") | two or more such lists
// separated by '/' ("1,3/3,1"); else InvalidArgument naming the choices, or the item that is
// not a count.
Result<PartitionMethod> ParsePartitionMethod(const std::string& text);
// The text ParsePartitionMethod reads back: "uniform", "params", "1,4,4,3" or "1,3/3,1".
std::string PartitionMethodName(const PartitionMethod& method);

// The method replica `replica` of `replicas` partitions its pipeline by: a kPerPipeline
// method's counts for it (InvalidArgument unless it names `replicas` pipelines), any other
// method itself.
Result<PartitionMethod> PipelineMethod(const PartitionMethod& method, int replica, int replicas);

// Builds the partition of `num_segments` segments into `num_stages` stages by `method` (not
// kPerPipeline: PipelineMethod first). `segment_params` is needed for kParams only. Explicit
// counts must give one count >= 1 per stage and add up to the segments.
Result<Partition> MakePartition(const PartitionMethod& method, int num_segments, int num_stages,
                                const std::vector<int64_t>& segment_params = {});
// The same for a method given as text (ParsePartitionMethod).
Result<Partition> MakePartition(const std::string& method, int num_segments, int num_stages,
                                const std::vector<int64_t>& segment_params = {});

}  // namespace mitra::cutpoint
