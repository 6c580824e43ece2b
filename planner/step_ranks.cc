#include "planner/step_ranks.h"

#include <algorithm>
#include <limits>

#include "mitra/planner/batch_split.h"

namespace mitra::planner::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The ranks on each machine of `ranks`, over every rank: ranks fill a machine's slots
// consecutively, so a rank's machine holds the run of equal names around it.
std::vector<int> MachineLoads(const std::vector<RankSpec>& specs, size_t machines,
                              const std::vector<std::string>& rank_machines) {
  const int world = static_cast<int>(rank_machines.size());
  std::vector<int> load(machines, 0);
  for (const RankSpec& spec : specs) {
    if (load[spec.machine] > 0) continue;
    int lo = spec.rank, hi = spec.rank;
    while (lo > 0 && rank_machines[lo - 1] == rank_machines[spec.rank]) --lo;
    while (hi + 1 < world && rank_machines[hi + 1] == rank_machines[spec.rank]) ++hi;
    load[spec.machine] = hi - lo + 1;
  }
  return load;
}

// Each rank's update at its machine's full load, and its start: where its update ends less
// where the earliest one does. Under ZeRO-1 a rank updates its share of the segments, then the
// stage's replicas broadcast their shares: together one stage's parameters over D processes,
// costed as half an all-reduce of them (a broadcast moves the bytes once, a ring all-reduce
// about twice).
void SetUpdatesAndStarts(const SimulationInput& in, RankSet* ranks) {
  const int D = in.candidate.replicas;
  const bool zero = in.candidate.zero && D > 1;
  double earliest = kInf;
  for (RankSpec& spec : ranks->specs) {
    double work = 0;
    int64_t stage_bytes = 0;
    for (size_t k = 0; k < spec.segments.size(); ++k) {
      const SegmentProfile& segment = spec.profile->segments[spec.segments[k]];
      if (!zero || KeepsOptimizerState(spec, D, static_cast<int>(k))) work += segment.update_s;
      stage_bytes += segment.parameter_bytes;
    }
    spec.update_s = work / spec.profile->SpeedAt(ranks->machine_load[spec.machine]);
    if (zero) spec.update_s += in.profile->AllreduceSeconds(D, stage_bytes) / 2;
    earliest = std::min(earliest, spec.update_s);
  }
  for (RankSpec& spec : ranks->specs) spec.start = spec.update_s - earliest;
}

}  // namespace

RankSet BuildRanks(const SimulationInput& in, const std::vector<int>& replicas) {
  const Profile& p = *in.profile;
  const Candidate& c = in.candidate;
  const int P = c.stages, D = c.replicas;
  RankSet out;
  out.index.assign(P * D, -1);
  out.specs.reserve(replicas.size() * P);
  std::map<std::string, int> machine_index;
  const ChunkLayout layout = LayoutOf(c.schedule, P, static_cast<int>(c.partition.size()));
  const int ranges = layout.num_virtual_stages();
  std::map<std::tuple<int, int64_t>, std::vector<Instruction>> lists;  // (stage, M) -> list
  for (int d : replicas) {
    std::vector<int> first_segment(ranges + 1, 0);
    for (int j = 0; j < ranges; ++j) first_segment[j + 1] = first_segment[j] + c.PartitionOf(d)[j];
    const BatchShare share = ShareOf(in.global_batch, c.chunk_size, c.shares, D, d);
    for (int stage = 0; stage < P; ++stage) {
      const int r = d * P + stage;
      out.index[r] = static_cast<int>(out.specs.size());
      RankSpec& spec = out.specs.emplace_back();
      spec.rank = r;
      spec.stage = stage;
      spec.replica = d;
      auto [it, added] =
          machine_index.emplace(in.rank_machines[r], static_cast<int>(out.addresses.size()));
      if (added) out.addresses.push_back(in.rank_machines[r]);
      spec.machine = it->second;
      spec.profile = &p.Machine(in.rank_machines[r]);
      for (int k = 0; k < layout.chunks; ++k) {
        const int j = layout.VirtualStage(stage, k);
        ChunkSpec& chunk = spec.chunks.emplace_back();
        chunk.first_segment = first_segment[j];
        chunk.end_segment = first_segment[j + 1];
        chunk.first = j == 0;
        chunk.last = j == ranges - 1;
        chunk.prev_rank = j > 0 ? d * P + layout.StageOf(j - 1) : -1;
        chunk.next_rank = j + 1 < ranges ? d * P + layout.StageOf(j + 1) : -1;
        chunk.prev_chunk = j > 0 ? layout.ChunkOf(j - 1) : 0;
        chunk.next_chunk = j + 1 < ranges ? layout.ChunkOf(j + 1) : 0;
        for (int i = chunk.first_segment; i < chunk.end_segment; ++i) spec.segments.push_back(i);
      }
      for (int64_t m = 0; m < share.micro_batches; ++m) {
        const SampleRange range =
            MicroBatchSamples(in.global_batch, c.chunk_size, share.first_micro_batch + m);
        spec.sizes.push_back(range.end - range.begin);
      }
      auto& list = lists[{stage, share.micro_batches}];
      if (list.empty()) {
        list = BuildSchedule(c.schedule, layout, stage, static_cast<int>(share.micro_batches),
                             c.recompute);
      }
      spec.list = list;
      for (size_t i = 0; i < spec.list.size(); ++i) {
        const Op op = spec.list[i].op;
        if (op == Op::kBackward || op == Op::kBackwardWeight) {
          spec.final_backward = static_cast<int>(i);
        }
      }
    }
  }
  out.machine_load = MachineLoads(out.specs, out.addresses.size(), in.rank_machines);
  SetUpdatesAndStarts(in, &out);
  return out;
}

const StageCosts::Cost& StageCosts::Of(const RankSpec& r, int chunk, int64_t size) const {
  const ChunkSpec& ch = r.chunks[chunk];
  const bool loads = ch.first || ch.last;  // the model's first or last chunk loads the samples
  const auto key = std::make_tuple(r.profile, ch.first_segment, ch.end_segment, loads, size);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  Cost c;
  for (int s = ch.first_segment; s < ch.end_segment; ++s) {
    const SegmentCost seg = profile_.CostAt(*r.profile, s, size);
    c.forward += seg.forward_s;
    c.nograd += seg.forward_nograd_s;
    c.backward += seg.backward_s;
    c.weight += seg.weight_s;
    c.graph_bytes += seg.graph_bytes;
  }
  if (loads) c.samples = r.profile->sample_s * static_cast<double>(size);
  if (ch.first_segment > 0) {
    c.input_bytes = profile_.CostAt(*r.profile, ch.first_segment - 1, size).output_bytes;
  }
  c.output_bytes = profile_.CostAt(*r.profile, ch.end_segment - 1, size).output_bytes;
  return memo_.emplace(key, c).first->second;
}

double StageCosts::Work(const RankSpec& r, const Instruction& ins, int64_t size) const {
  const Cost& c = Of(r, ins.chunk, size);
  switch (ins.op) {
    case Op::kForward:
      return c.forward + c.samples;
    case Op::kForwardDiscard:
      return c.nograd + c.samples;
    case Op::kRecompute:  // no loading: the inputs are stashed
      return c.forward;
    case Op::kBackward:
      return c.backward;
    case Op::kBackwardInput:
      return c.backward - c.weight;
    case Op::kBackwardWeight:
      return c.weight;
    default:
      return 0;
  }
}

int64_t StageCosts::InputBytes(const RankSpec& r, int chunk, int64_t size) const {
  return Of(r, chunk, size).input_bytes;
}

int64_t StageCosts::OutputBytes(const RankSpec& r, int chunk, int64_t size) const {
  return Of(r, chunk, size).output_bytes;
}

int64_t StageCosts::GraphBytes(const RankSpec& r, int chunk, int64_t size) const {
  return Of(r, chunk, size).graph_bytes;
}

int64_t PeakActivationBytes(const RankSpec& spec, const StageCosts& costs) {
  const auto remote = [&](int rank) { return rank >= 0 && rank != spec.rank; };
  // The activation receives from other ranks, which the runtime posts ahead.
  std::vector<int64_t> ahead_bytes;
  std::vector<size_t> ahead_at;
  for (size_t k = 0; k < spec.list.size(); ++k) {
    const Instruction& ins = spec.list[k];
    if (ins.op == Op::kRecvActivations && remote(spec.chunks[ins.chunk].prev_rank)) {
      ahead_at.push_back(k);
      ahead_bytes.push_back(costs.InputBytes(spec, ins.chunk, spec.sizes[ins.micro_batch]));
    }
  }
  int64_t held = 0, peak = 0;
  size_t next = 0;  // the first of ahead_at not yet reached
  for (size_t k = 0; k < spec.list.size(); ++k) {
    const Instruction& ins = spec.list[k];
    const int64_t size = spec.sizes[ins.micro_batch];
    const bool gradient_comes_back = remote(spec.chunks[ins.chunk].next_rank);
    switch (ins.op) {
      case Op::kRecvActivations:
        held += costs.InputBytes(spec, ins.chunk, size);
        break;
      case Op::kForward:
      case Op::kRecompute:
        held += costs.GraphBytes(spec, ins.chunk, size);
        break;
      case Op::kSendActivations:  // the gradients' receive is posted now
        if (gradient_comes_back) held += costs.OutputBytes(spec, ins.chunk, size);
        break;
      case Op::kBackward:
      case Op::kBackwardInput:  // the backward has taken the received gradients
        if (gradient_comes_back) held -= costs.OutputBytes(spec, ins.chunk, size);
        if (ins.op == Op::kBackward) held -= costs.GraphBytes(spec, ins.chunk, size);
        break;
      case Op::kBackwardWeight:  // a B keeps what the W needs: counted held until the W
        held -= costs.GraphBytes(spec, ins.chunk, size);
        break;
      case Op::kSendGradients:
        held -= costs.InputBytes(spec, ins.chunk, size);
        break;
      default:
        break;
    }
    while (next < ahead_at.size() && ahead_at[next] <= k) ++next;
    const size_t end = std::min(next + kActivationReceivesAhead, ahead_at.size());
    int64_t posted = 0;
    for (size_t a = next; a < end; ++a) posted += ahead_bytes[a];
    peak = std::max(peak, held + posted);
  }
  return peak;
}

}  // namespace mitra::planner::detail
