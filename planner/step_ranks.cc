#include "planner/step_ranks.h"

#include <algorithm>
#include <limits>

#include "planner/batch_split.h"

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
    for (int s = spec.first_segment; s < spec.end_segment; ++s) {
      if (!zero || KeepsOptimizerState(spec, D, s)) work += spec.profile->segments[s].update_s;
      stage_bytes += spec.profile->segments[s].parameter_bytes;
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
  std::vector<int> first_segment(P + 1, 0);
  for (int s = 0; s < P; ++s) first_segment[s + 1] = first_segment[s] + c.partition[s];
  std::map<std::tuple<int, int64_t>, std::vector<Instruction>> lists;  // (stage, M) -> list
  for (int d : replicas) {
    const BatchShare share = ShareOf(in.global_batch, c.chunk_size, D, d);
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
      spec.first_segment = first_segment[stage];
      spec.end_segment = first_segment[stage + 1];
      spec.first = stage == 0;
      spec.last = stage == P - 1;
      for (int64_t m = 0; m < share.micro_batches; ++m) {
        const SampleRange range =
            MicroBatchSamples(in.global_batch, c.chunk_size, share.first_micro_batch + m);
        spec.sizes.push_back(range.end - range.begin);
      }
      auto& list = lists[{stage, share.micro_batches}];
      if (list.empty()) {
        list = BuildSchedule(c.schedule, P, stage, static_cast<int>(share.micro_batches),
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

const StageCosts::Cost& StageCosts::Of(const RankSpec& r, int64_t size) const {
  const auto key = std::make_tuple(r.profile, r.first_segment, r.end_segment, size);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  Cost c;
  for (int s = r.first_segment; s < r.end_segment; ++s) {
    const SegmentCost seg = profile_.CostAt(*r.profile, s, size);
    c.forward += seg.forward_s;
    c.nograd += seg.forward_nograd_s;
    c.backward += seg.backward_s;
    c.weight += seg.weight_s;
    c.graph_bytes += seg.graph_bytes;
  }
  if (r.first || r.last) {  // a first or last stage loads the micro-batch's samples
    c.forward += r.profile->sample_s * static_cast<double>(size);
    c.nograd += r.profile->sample_s * static_cast<double>(size);
  }
  if (r.first_segment > 0) {
    c.input_bytes = profile_.CostAt(*r.profile, r.first_segment - 1, size).output_bytes;
  }
  c.output_bytes = profile_.CostAt(*r.profile, r.end_segment - 1, size).output_bytes;
  return memo_.emplace(key, c).first->second;
}

double StageCosts::Work(const RankSpec& r, Op op, int64_t size) const {
  const Cost& c = Of(r, size);
  switch (op) {
    case Op::kForward:
      return c.forward;
    case Op::kForwardDiscard:
      return c.nograd;
    case Op::kRecompute:  // no loading: the inputs are stashed
      return c.forward -
             ((r.first || r.last) ? r.profile->sample_s * static_cast<double>(size) : 0.0);
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

int64_t StageCosts::InputBytes(const RankSpec& r, int64_t size) const {
  return Of(r, size).input_bytes;
}

int64_t StageCosts::OutputBytes(const RankSpec& r, int64_t size) const {
  return Of(r, size).output_bytes;
}

int64_t StageCosts::GraphBytes(const RankSpec& r, int64_t size) const {
  return Of(r, size).graph_bytes;
}

int64_t PeakActivationBytes(const RankSpec& spec, const StageCosts& costs) {
  int64_t held = 0, peak = 0;
  for (const Instruction& ins : spec.list) {
    const int64_t size = spec.sizes[ins.micro_batch];
    switch (ins.op) {
      case Op::kRecvActivations:
        held += costs.InputBytes(spec, size);
        break;
      case Op::kForward:
      case Op::kRecompute:
        held += costs.GraphBytes(spec, size);
        break;
      case Op::kBackward:
      case Op::kBackwardWeight:  // a B keeps what the W needs: counted held until the W
        held -= costs.GraphBytes(spec, size);
        break;
      case Op::kSendGradients:
        held -= costs.InputBytes(spec, size);
        break;
      default:
        break;
    }
    peak = std::max(peak, held);
  }
  return peak;
}

}  // namespace mitra::planner::detail
