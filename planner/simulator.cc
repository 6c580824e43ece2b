#include "planner/simulator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "mitra/planner/batch_split.h"
#include "planner/pipeline_run.h"
#include "planner/replica_groups.h"
#include "mitra/planner/schedule.h"
#include "planner/step_ranks.h"

namespace mitra::planner {
namespace {

using detail::ChunkSpec;
using detail::RankSet;
using detail::RankSpec;
using detail::StageCosts;
using detail::Timeline;
using detail::TraceEvent;

constexpr double kInf = std::numeric_limits<double>::infinity();

Status CheckInput(const SimulationInput& in) {
  const Profile& p = *in.profile;
  const Candidate& c = in.candidate;
  const int P = c.stages, D = c.replicas, R = P * D;
  if (P < 1 || D < 1 || c.chunk_size < 1 || in.global_batch < 1) {
    return Status::InvalidArgument("a shape needs P, D, the micro-batch and the batch >= 1");
  }
  const int ranges =
      LayoutOf(c.schedule, P, static_cast<int>(c.partition.size())).num_virtual_stages();
  if (!c.pipelines.empty() && (static_cast<int>(c.pipelines.size()) != D || c.zero)) {
    return Status::InvalidArgument("partition " + c.PartitionText() + " needs one list of counts "
                                   "for each of the " + std::to_string(D) +
                                   " replicas, and no ZeRO-1");
  }
  for (int d = 0; d < D; ++d) {
    const std::vector<int>& counts = c.PartitionOf(d);
    if (static_cast<int>(counts.size()) != ranges ||
        std::accumulate(counts.begin(), counts.end(), 0) != p.num_segments() ||
        *std::min_element(counts.begin(), counts.end()) < 1) {
      return Status::InvalidArgument("partition " + c.PartitionText() + " does not split the " +
                                     std::to_string(p.num_segments()) + " segments into " +
                                     std::to_string(ranges) + " ranges (" + std::to_string(P) +
                                     " stages under " + ScheduleName(c.schedule) + ")");
    }
  }
  if (NumMicroBatches(in.global_batch, c.chunk_size) < D) {
    return Status::InvalidArgument("a batch of " + std::to_string(in.global_batch) +
                                   " in micro-batches of " + std::to_string(c.chunk_size) +
                                   " cannot feed " + std::to_string(D) + " replicas");
  }
  if (Status s = CheckShares(c.shares, NumMicroBatches(in.global_batch, c.chunk_size), D);
      !s.ok()) {
    return s;
  }
  if (c.schedule == ScheduleKind::kInterleaved) {
    for (int d = 0; d < D; ++d) {
      const BatchShare share = ShareOf(in.global_batch, c.chunk_size, c.shares, D, d);
      if (!InterleavedFits(P, static_cast<int>(share.micro_batches))) {
        return Status::InvalidArgument("interleaved needs each replica's micro-batches a multiple "
                                       "of the " + std::to_string(P) + " stages");
      }
    }
  }
  if (static_cast<int>(in.rank_machines.size()) != R) {
    return Status::InvalidArgument("the shape has " + std::to_string(R) + " ranks but " +
                                   std::to_string(in.rank_machines.size()) +
                                   " machines were given");
  }
  return Status::Ok();
}

// What identifies a group's pipeline phase: its ranks' stages, segments, machines (by order of
// first use in the group), machine profiles and loads, starts and micro-batches. Groups alike
// run alike.
std::string GroupSignature(const RankSet& ranks, const std::vector<int>& members) {
  std::ostringstream key;
  std::map<int, int> relative;  // machine -> order of first use in the group
  for (int i : members) {
    const RankSpec& s = ranks.specs[i];
    auto [it, added] = relative.emplace(s.machine, static_cast<int>(relative.size()));
    key << s.stage << ':' << it->second << ':' << s.profile << ':' << ranks.machine_load[s.machine]
        << ':' << s.start << ':';
    for (const ChunkSpec& c : s.chunks) key << c.first_segment << '-' << c.end_segment << ',';
    for (int64_t size : s.sizes) key << size << ',';
    key << ';';
  }
  return key.str();
}

// The pipeline phase of every simulated rank (by spec): each group of linked replicas together,
// or, past kMaxSharedRanks ranks, replica by replica with each machine at its full load; groups
// alike only once.
std::vector<Timeline> RunLinkedGroups(const RankSet& ranks, const StageCosts& costs,
                                      const Profile& profile, bool trace) {
  std::vector<Timeline> timeline(ranks.specs.size());
  std::map<std::string, std::vector<Timeline>> memo;
  for (const std::vector<int>& members : detail::LinkedReplicaGroups(ranks)) {
    std::vector<std::vector<int>> parts;
    const bool shared = static_cast<int>(members.size()) <= kMaxSharedRanks;
    if (shared) {
      parts.push_back(members);
    } else {
      std::map<int, std::vector<int>> by_replica;
      for (int i : members) by_replica[ranks.specs[i].replica].push_back(i);
      for (auto& [replica, rs] : by_replica) parts.push_back(rs);
    }
    for (const std::vector<int>& part : parts) {
      const std::string key = (shared ? "s" : "f") + GroupSignature(ranks, part);
      auto it = memo.find(key);
      if (it == memo.end()) {
        const std::vector<int>* fixed_load = shared ? nullptr : &ranks.machine_load;
        it = memo.emplace(key, detail::RunPipelines(ranks, part, fixed_load, costs, profile, trace))
                 .first;
      }
      for (size_t i = 0; i < part.size(); ++i) timeline[part[i]] = it->second[i];
    }
  }
  return timeline;
}

// When a stage's data-parallel all-reduce over D replicas is done: its gradients, overlapped
// with the last backward (which the replicas ran from `last_start` to `last_end` at the latest,
// their pipelines done at `done`), then its buffers.
double StageReduced(const Profile& p, int D, int64_t bucket_bytes, int64_t gradient_bytes,
                    int64_t buffer_bytes, double last_start, double last_end, double done) {
  if (D <= 1) return done;
  double reduced;
  const double measured = p.AllreduceAfterCompute(D, gradient_bytes);
  if (measured >= 0) {  // as measured with the cores busy
    reduced = std::max(done, last_end + measured);
  } else {  // the buckets overlap the last backward
    reduced =
        std::max({done, last_end + p.AllreduceSeconds(D, std::min(bucket_bytes, gradient_bytes)),
                  last_start + p.AllreduceSeconds(D, gradient_bytes)});
  }
  return reduced + p.AllreduceSeconds(D, buffer_bytes);
}

// ReadyForSync when each pipeline has its own partition: a rank's gradients are reduced with
// the ranks that hold any of its segments in the other replicas (several groups, one per
// holder set), taken here as one reduction of its gradients that waits for all of them.
std::vector<double> ReadyForSyncPerPipeline(const SimulationInput& in, const RankSet& ranks,
                                            const std::vector<Timeline>& timeline) {
  const auto overlap = [](const RankSpec& a, const RankSpec& b) {
    for (const ChunkSpec& x : a.chunks) {
      for (const ChunkSpec& y : b.chunks) {
        if (x.first_segment < y.end_segment && y.first_segment < x.end_segment) return true;
      }
    }
    return false;
  };
  std::vector<double> ready(ranks.specs.size());
  for (size_t i = 0; i < ranks.specs.size(); ++i) {
    const RankSpec& mine = ranks.specs[i];
    int64_t gradient_bytes = 0, buffer_bytes = 0;
    for (int seg : mine.segments) {
      gradient_bytes += mine.profile->segments[seg].parameter_bytes;
      buffer_bytes += mine.profile->segments[seg].buffer_bytes;
    }
    double last_start = 0, last_end = 0, done = 0;
    for (size_t j = 0; j < ranks.specs.size(); ++j) {
      if (j != i && !overlap(mine, ranks.specs[j])) continue;
      last_start = std::max(last_start, timeline[j].final_backward_start);
      last_end = std::max(last_end, timeline[j].final_backward_end);
      done = std::max(done, timeline[j].done);
    }
    const double reduced = StageReduced(*in.profile, in.candidate.replicas, in.bucket_bytes,
                                        gradient_bytes, buffer_bytes, last_start, last_end, done);
    ready[i] = std::max(timeline[i].done, reduced);
  }
  return ready;
}

// When each simulated rank (by spec) is ready for the step's all-reduce: at the end of its
// pipeline phase and of its stage's data-parallel all-reduce.
std::vector<double> ReadyForSync(const SimulationInput& in, const RankSet& ranks,
                                 const std::vector<int>& replicas,
                                 const std::vector<Timeline>& timeline) {
  if (!in.candidate.pipelines.empty()) return ReadyForSyncPerPipeline(in, ranks, timeline);
  const int P = in.candidate.stages, D = in.candidate.replicas;
  std::vector<double> ready(ranks.specs.size());
  for (int s = 0; s < P; ++s) {
    const RankSpec& first = ranks.specs[ranks.index[s]];
    int64_t gradient_bytes = 0, buffer_bytes = 0;
    for (int seg : first.segments) {
      gradient_bytes += first.profile->segments[seg].parameter_bytes;
      buffer_bytes += first.profile->segments[seg].buffer_bytes;
    }
    double last_start = 0, last_end = 0, done = 0;
    for (int d : replicas) {
      const Timeline& t = timeline[ranks.index[d * P + s]];
      last_start = std::max(last_start, t.final_backward_start);
      last_end = std::max(last_end, t.final_backward_end);
      done = std::max(done, t.done);
    }
    const double reduced = StageReduced(*in.profile, D, in.bucket_bytes, gradient_bytes,
                                        buffer_bytes, last_start, last_end, done);
    for (int d : replicas) {
      const int i = ranks.index[d * P + s];
      ready[i] = std::max(timeline[i].done, reduced);
    }
  }
  return ready;
}

// Each replica's pipeline phase, from its first rank's start to its last rank's end; 0 for a
// replica not simulated.
std::vector<double> ReplicaPhases(int replicas, const std::vector<RankSpec>& specs,
                                  const std::vector<Timeline>& timeline) {
  std::vector<double> start(replicas, kInf), end(replicas, 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    start[specs[i].replica] = std::min(start[specs[i].replica], specs[i].start);
    end[specs[i].replica] = std::max(end[specs[i].replica], timeline[i].done);
  }
  std::vector<double> out(replicas, 0);
  for (int d = 0; d < replicas; ++d) out[d] = start[d] < kInf ? end[d] - start[d] : 0;
  return out;
}

// The ranks' idle share of the pipeline phase, from the earliest start to the latest end.
double BubbleFraction(const std::vector<RankSpec>& specs, const std::vector<Timeline>& timeline) {
  double span = 0, busy = 0, start = kInf;
  for (size_t i = 0; i < specs.size(); ++i) {
    span = std::max(span, timeline[i].done);
    start = std::min(start, specs[i].start);
    busy += timeline[i].busy;
  }
  span -= start;
  return span > 0 ? std::max(0.0, 1.0 - busy / (static_cast<double>(specs.size()) * span)) : 0.0;
}

// A rank's memory besides activations: parameters, their gradients, optimizer state (under
// ZeRO-1 its share's only) and buffers, and with D > 1 the data-parallel buckets.
int64_t FixedBytes(const RankSpec& spec, int D, bool zero) {
  int64_t fixed = 0;
  for (size_t k = 0; k < spec.segments.size(); ++k) {
    const SegmentProfile& seg = spec.profile->segments[spec.segments[k]];
    const bool keeps_state = !zero || detail::KeepsOptimizerState(spec, D, static_cast<int>(k));
    fixed += 2 * seg.parameter_bytes + seg.buffer_bytes +
             (keeps_state ? seg.optimizer_bytes : 0) + (D > 1 ? seg.parameter_bytes : 0);
  }
  return fixed;
}

// Prediction::memory_bytes and max_memory_bytes: each simulated rank's fixed memory and the peak
// of the activations its list keeps; a rank not simulated holds what the same stage of the first
// simulated replica holds.
void AccountMemory(const RankSet& ranks, const StageCosts& costs, int P, int D, bool zero,
                   int first_replica, Prediction* out) {
  std::map<std::tuple<int, int64_t, const MachineProfile*>, int64_t> peak_of;
  std::vector<int64_t> spec_memory(ranks.specs.size());
  for (size_t i = 0; i < ranks.specs.size(); ++i) {
    const RankSpec& spec = ranks.specs[i];
    auto key = std::make_tuple(spec.stage, static_cast<int64_t>(spec.sizes.size()), spec.profile);
    auto found = peak_of.find(key);
    if (found == peak_of.end()) {
      found = peak_of.emplace(key, detail::PeakActivationBytes(spec, costs)).first;
    }
    spec_memory[i] = FixedBytes(spec, D, zero) + found->second;
    out->max_memory_bytes = std::max(out->max_memory_bytes, spec_memory[i]);
  }
  const int R = P * D;
  out->memory_bytes.assign(R, 0);
  for (int r = 0; r < R; ++r) {
    if (ranks.index[r] >= 0) out->memory_bytes[r] = spec_memory[ranks.index[r]];
  }
  for (int r = 0; r < R; ++r) {
    if (out->memory_bytes[r] == 0) {
      out->memory_bytes[r] = out->memory_bytes[(r % P) + first_replica * P];
    }
  }
}

// Prediction::ops and trace: each simulated rank's computations and waits, its wait for the
// data-parallel all-reduce, and its update after the step's all-reduce at `synced`.
void RecordTrace(const RankSet& ranks, const std::vector<Timeline>& timeline,
                 const std::vector<double>& ready, double synced, Prediction* out) {
  nlohmann::json events = nlohmann::json::array();
  auto event = [&](int r, const std::string& name, double from, double to) {
    events.push_back({{"name", name}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                      {"ts", from * 1e6}, {"dur", std::max(0.0, to - from) * 1e6}});
  };
  for (size_t i = 0; i < ranks.specs.size(); ++i) {
    const RankSpec& spec = ranks.specs[i];
    const int r = spec.rank;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", "rank " + std::to_string(r) + " (stage " +
                                             std::to_string(spec.stage) + ", replica " +
                                             std::to_string(spec.replica) + ")"}}}});
    for (const TraceEvent& e : timeline[i].events) event(r, e.name, e.start, e.end);
    if (ready[i] > timeline[i].done) event(r, "reduce", timeline[i].done, ready[i]);
    event(r, "update", synced, synced + spec.update_s);
    for (const TraceEvent& e : timeline[i].events) out->ops.push_back({r, e.name, e.start, e.end});
    out->ops.push_back({r, "reduce", timeline[i].done, ready[i]});
    out->ops.push_back({r, "update", synced, synced + spec.update_s});
  }
  out->trace = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace

std::string Candidate::PartitionText() const {
  const auto counts = [](const std::vector<int>& p) {
    std::string out;
    for (int c : p) out += (out.empty() ? "" : ",") + std::to_string(c);
    return out;
  };
  if (pipelines.empty()) return counts(partition);
  std::string out;
  for (const std::vector<int>& p : pipelines) out += (out.empty() ? "" : "/") + counts(p);
  return out;
}

std::string Candidate::ScheduleText() const {
  return std::string(ScheduleName(schedule)) + (recompute ? "+recompute" : "");
}

std::string Candidate::ToString() const {
  std::ostringstream out;
  out << stages << " x " << replicas << ", micro-batch " << chunk_size << ", " << ScheduleText()
      << (zero && replicas > 1 ? ", ZeRO-1" : "") << ", partition " << PartitionText();
  if (Uneven(shares)) out << ", shares " << SharesText(shares);
  return out.str();
}

Result<Prediction> Simulate(const SimulationInput& in) {
  if (Status checked = CheckInput(in); !checked.ok()) return checked;
  const Profile& p = *in.profile;
  const Candidate& c = in.candidate;

  const int64_t micro_batches = NumMicroBatches(in.global_batch, c.chunk_size);
  // Uneven shares and a partition per pipeline are for machines that differ, where every
  // replica is simulated anyway.
  std::vector<int> replicas;
  if (Uneven(c.shares) || !c.pipelines.empty()) {
    replicas.resize(c.replicas);
    std::iota(replicas.begin(), replicas.end(), 0);
  } else {
    replicas = detail::SimulatedReplicas(p, in.rank_machines, c.stages, c.replicas,
                                         static_cast<int>(micro_batches % c.replicas));
  }
  const RankSet ranks = detail::BuildRanks(in, replicas);
  const StageCosts costs(p);
  const std::vector<Timeline> timeline = RunLinkedGroups(ranks, costs, p, in.trace);

  // The data-parallel all-reduces, then the step's all-reduce and every rank's update.
  const std::vector<double> ready = ReadyForSync(in, ranks, replicas, timeline);
  // One process has no one to sync with.
  const double sync_s = c.stages * c.replicas > 1 ? p.step_sync_s : 0;
  const double synced = *std::max_element(ready.begin(), ready.end()) + sync_s;
  const RankSpec& rank0 = ranks.specs[ranks.index[0]];

  Prediction out;
  out.step_s = synced + rank0.update_s - rank0.start;
  out.bubble_fraction = BubbleFraction(ranks.specs, timeline);
  out.replica_phase_s = ReplicaPhases(c.replicas, ranks.specs, timeline);
  AccountMemory(ranks, costs, c.stages, c.replicas, c.zero, replicas.front(), &out);
  if (in.trace) RecordTrace(ranks, timeline, ready, synced, &out);
  return out;
}

}  // namespace mitra::planner
