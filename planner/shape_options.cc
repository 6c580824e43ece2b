#include "planner/shape_options.h"

#include <algorithm>
#include <limits>
#include <map>

#include "mitra/planner/batch_split.h"
#include "planner/grid.h"

namespace mitra::planner::detail {
namespace {

constexpr int kAllReplicaCountsUpTo = 64;

// Each segment's fastest forward and backward on any machine, by micro-batch size (memoised).
class FastestSegments {
 public:
  explicit FastestSegments(const Profile& profile) : profile_(profile) {}

  // [2 s]: segment s's forward, [2 s + 1]: its backward.
  const std::vector<double>& At(int64_t chunk) {
    auto it = memo_.find(chunk);
    if (it != memo_.end()) return it->second;
    const int segments = profile_.num_segments();
    std::vector<double> out(2 * segments, std::numeric_limits<double>::infinity());
    for (const MachineProfile& m : profile_.machines) {
      for (int s = 0; s < segments; ++s) {
        const SegmentCost c = profile_.CostAt(m, s, chunk);
        out[2 * s] = std::min(out[2 * s], c.forward_s);
        out[2 * s + 1] = std::min(out[2 * s + 1], c.backward_s);
      }
    }
    return memo_.emplace(chunk, out).first->second;
  }

 private:
  const Profile& profile_;
  std::map<int64_t, std::vector<double>> memo_;
};

// The most a process's speed can be (speed per process <= this, and at least 1).
double FastestSpeed(const Profile& profile) {
  double fastest = 1.0;
  for (const MachineProfile& m : profile.machines) {
    for (double v : m.speed) fastest = std::max(fastest, v);
  }
  return fastest;
}

// ShapeOption::bound for `partition` (of `layout`'s virtual stages) from `best`
// (FastestSegments::At): the busiest rank's work, every chunk of it; `discards`: every range but
// the model's last recomputes its forwards.
double LowerBound(const std::vector<double>& best, const std::vector<int>& partition,
                  const ChunkLayout& layout, bool discards, int64_t per_replica, double fastest) {
  const int ranges = static_cast<int>(partition.size());
  std::vector<double> work(layout.stages, 0.0);  // by position
  for (int j = 0, seg = 0; j < ranges; ++j) {
    for (int k = 0; k < partition[j]; ++k, ++seg) {
      work[layout.StageOf(j)] +=
          best[2 * seg] * (discards && j + 1 < ranges ? 2 : 1) + best[2 * seg + 1];
    }
  }
  return static_cast<double>(per_replica) * *std::max_element(work.begin(), work.end()) / fastest;
}

// The layouts `schedule` can take at P = `p` on a model of `segments` segments: interleaved's
// v chunks per rank from 2 to kMostInterleavedChunks, the others' one.
constexpr int kMostInterleavedChunks = 4;
std::vector<ChunkLayout> Layouts(ScheduleKind schedule, int p, int segments) {
  if (schedule != ScheduleKind::kInterleaved) return {LayoutOf(schedule, p)};
  std::vector<ChunkLayout> layouts;
  for (int v = 2; v <= kMostInterleavedChunks && v * p <= segments; ++v) {
    layouts.push_back(LayoutOf(schedule, p, v * p));
  }
  return layouts;
}

// Whether schedule `schedule` can run P = `p` stages of `d` replicas on the batch in `layout`:
// enough segments for its chunks, and under interleaved each replica's micro-batches a multiple
// of P.
bool ScheduleRuns(ScheduleKind schedule, const ChunkLayout& layout, int p, int d, int segments,
                  int64_t batch, int64_t chunk) {
  if (layout.num_virtual_stages() > segments) return false;
  if (schedule != ScheduleKind::kInterleaved) return true;
  for (int r = 0; r < d; ++r) {
    if (!InterleavedFits(p, static_cast<int>(ShareOf(batch, chunk, d, r).micro_batches))) {
      return false;
    }
  }
  return true;
}

// Each of `schedules` in each layout it can run in (Layouts, ScheduleRuns).
std::vector<std::pair<ScheduleKind, ChunkLayout>> RunnableLayouts(
    const std::vector<ScheduleKind>& schedules, int p, int d, int segments, int64_t batch,
    int64_t chunk) {
  std::vector<std::pair<ScheduleKind, ChunkLayout>> out;
  for (ScheduleKind schedule : schedules) {
    for (const ChunkLayout& layout : Layouts(schedule, p, segments)) {
      if (ScheduleRuns(schedule, layout, p, d, segments, batch, chunk)) out.emplace_back(schedule, layout);
    }
  }
  return out;
}

std::vector<int> Depths(const PlanRequest& request, int slots) {
  std::vector<int> depths;
  if (request.stages > 0) {
    depths.push_back(request.stages);
  } else {
    for (int p = 1; p <= std::min(request.profile->num_segments(), slots); ++p) depths.push_back(p);
  }
  return depths;
}

}  // namespace

std::vector<int> ReplicaCounts(int most) {
  std::vector<int> out;
  if (most <= kAllReplicaCountsUpTo) {
    for (int d = 1; d <= most; ++d) out.push_back(d);
    return out;
  }
  for (int d = 1; d < most; d *= 2) out.push_back(d);
  out.push_back(most);
  return out;
}

std::set<int64_t> MicroBatchSizes(const PlanRequest& request, int stages, int replicas) {
  std::set<int64_t> chunks;
  if (request.chunk_size > 0) {
    chunks.insert(request.chunk_size);
  } else {
    for (int64_t c : request.profile->micro_batches) chunks.insert(c);
    chunks.insert(DefaultChunkSize(request.global_batch, stages, replicas, request.chunk_kept));
  }
  return chunks;
}

std::vector<int> StagePartition(const Profile& profile,
                                const std::vector<std::string>& stage_machines, int stages,
                                int64_t chunk, int64_t per_replica) {
  const int segments = profile.num_segments();
  const MachineProfile& typical = profile.Machine(stage_machines[0]);
  std::vector<double> cost(segments);
  for (int s = 0; s < segments; ++s) {
    const SegmentCost c = profile.CostAt(typical, s, chunk);
    cost[s] = static_cast<double>(per_replica) * (c.forward_s + c.backward_s) +
              typical.segments[s].update_s;
  }
  std::vector<double> speed(stages, 1.0);
  const SegmentCost ref = profile.CostAt(typical, 0, chunk);
  for (int s = 0; s < stages; ++s) {
    const SegmentCost mine = profile.CostAt(profile.Machine(stage_machines[s]), 0, chunk);
    if (mine.forward_s + mine.backward_s > 0) {
      speed[s] = (ref.forward_s + ref.backward_s) / (mine.forward_s + mine.backward_s);
    }
  }
  return BalancedPartition(cost, speed);
}

// The pipelines of a P x D grid by kind: the profiles of their stages' machines, in stage order.
// Pipelines of one kind take one partition.
struct PipelineKinds {
  std::vector<std::vector<const MachineProfile*>> kinds;
  std::vector<int> kind_of;  // by replica
};

PipelineKinds KindsOf(const std::vector<const MachineProfile*>& machine_profiles,
                      const std::vector<MachineSlots>& machines, int p, int d) {
  PipelineKinds out;
  std::map<std::vector<const MachineProfile*>, int> index;
  const std::vector<int> rank_machines = RankMachines(SlotsOf(machines), p * d);
  for (int replica = 0; replica < d; ++replica) {
    std::vector<const MachineProfile*> stages;
    for (int s = 0; s < p; ++s) stages.push_back(machine_profiles[rank_machines[replica * p + s]]);
    auto [it, added] = index.try_emplace(stages, static_cast<int>(out.kinds.size()));
    if (added) out.kinds.push_back(stages);
    out.kind_of.push_back(it->second);
  }
  return out;
}

// Each pipeline's partition: the virtual stages of `layout` balanced for the machines that run
// them; empty where every pipeline takes the first's.
std::vector<std::vector<int>> EachPipelinesPartition(const Profile& profile,
                                                     const PipelineKinds& pipelines,
                                                     const ChunkLayout& layout, int64_t chunk,
                                                     int64_t per_replica,
                                                     std::vector<int>* first) {
  std::vector<std::vector<int>> by_kind;
  for (const std::vector<const MachineProfile*>& kind : pipelines.kinds) {
    std::vector<std::string> range_machines;
    for (int j = 0; j < layout.num_virtual_stages(); ++j) {
      range_machines.push_back(kind[layout.StageOf(j)]->address);
    }
    by_kind.push_back(
        StagePartition(profile, range_machines, layout.num_virtual_stages(), chunk, per_replica));
  }
  *first = by_kind[pipelines.kind_of.front()];
  if (std::all_of(by_kind.begin(), by_kind.end(), [&](const auto& q) { return q == *first; })) {
    return {};
  }
  std::vector<std::vector<int>> out;
  for (int kind : pipelines.kind_of) out.push_back(by_kind[kind]);
  return out;
}

// ZeRO-1 with `d` replicas: as the request fixes it, else without and then with (an option with
// it is simulated only when the shape does not fit without: SearchShapes).
std::vector<bool> ZeroChoices(const PlanRequest& request, int d) {
  if (d == 1 || request.zero == false) return {false};
  if (request.zero == true) return {true};
  return {false, true};
}

std::vector<ShapeOption> EnumerateShapeOptions(const PlanRequest& request, int slots) {
  const Profile& profile = *request.profile;
  const int64_t batch = request.global_batch;
  const double fastest = FastestSpeed(profile);
  FastestSegments fastest_segments(profile);
  std::vector<const MachineProfile*> machine_profiles;  // by machine of the request
  for (const MachineSlots& m : request.machines) {
    machine_profiles.push_back(&profile.Machine(m.address));
  }
  std::vector<ShapeOption> options;
  for (int p : Depths(request, slots)) {
    if (p > slots) continue;
    for (int d : ReplicaCounts(slots / p)) {
      const PipelineKinds kinds = KindsOf(machine_profiles, request.machines, p, d);
      for (int64_t chunk : MicroBatchSizes(request, p, d)) {
        if (chunk > batch || NumMicroBatches(batch, chunk) < d) continue;
        const int64_t per_replica = (NumMicroBatches(batch, chunk) + d - 1) / d;
        const std::vector<double>& best = fastest_segments.At(chunk);
        const std::vector<ScheduleKind> schedules =
            p == 1 ? std::vector<ScheduleKind>{ScheduleKind::k1F1B} : request.schedules;
        for (const auto& [schedule, layout] :
             RunnableLayouts(schedules, p, d, profile.num_segments(), batch, chunk)) {
          std::vector<int> partition;  // the first pipeline's
          const std::vector<std::vector<int>> pipelines =
              EachPipelinesPartition(profile, kinds, layout, chunk, per_replica, &partition);
          for (bool recompute : {false, true}) {
            const bool varuna = schedule == ScheduleKind::kVaruna;
            if (recompute && (p == 1 || varuna)) continue;
            const bool discards = recompute || varuna;
            for (bool zero : ZeroChoices(request, d)) {
              // Replica 0's partition for every pipeline, and where the pipelines' machines
              // differ, each its own (not under ZeRO-1, which shards a stage's state over its
              // replicas).
              for (bool own : {false, true}) {
                if (own && (pipelines.empty() || zero)) continue;
                ShapeOption& option = options.emplace_back();
                option.candidate.stages = p;
                option.candidate.replicas = d;
                option.candidate.chunk_size = chunk;
                option.candidate.schedule = schedule;
                option.candidate.recompute = recompute;
                option.candidate.zero = zero;
                option.candidate.partition = partition;
                if (own) option.candidate.pipelines = pipelines;
                // The replica whose pipeline is least loaded bounds the step.
                option.bound = LowerBound(best, partition, layout, discards, per_replica, fastest);
                for (const std::vector<int>& q : option.candidate.pipelines) {
                  option.bound = std::min(
                      option.bound, LowerBound(best, q, layout, discards, per_replica, fastest));
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(options.begin(), options.end(),
                   [](const ShapeOption& a, const ShapeOption& b) { return a.bound < b.bound; });
  return options;
}

}  // namespace mitra::planner::detail
