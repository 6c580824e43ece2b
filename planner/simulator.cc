#include "planner/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "planner/batch_split.h"
#include "planner/schedule.h"

namespace mitra::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-12;

struct TraceEvent {
  std::string name;
  double start = 0, end = 0;
};

// What a rank does in the step, fixed before the simulation.
struct RankSpec {
  int rank = 0, stage = 0, replica = 0;
  int machine = 0;  // index into the input's distinct machines
  const MachineProfile* profile = nullptr;
  std::vector<Instruction> list;
  std::vector<int64_t> sizes;  // of its micro-batches
  int first_segment = 0, end_segment = 0;
  bool first = false, last = false;
  int final_backward = -1;  // index in `list`
  double start = 0;         // when its step begins (where its previous update ended)
  double update_s = 0;      // its update, at its machine's full load
};

// What the pipeline phase of a rank came to.
struct Timeline {
  double done = 0;
  double final_backward_start = 0, final_backward_end = 0;
  double busy = 0;  // wall time computing
  std::vector<TraceEvent> events;
};

class StepModel {
 public:
  StepModel(const SimulationInput& in, const Profile& profile) : in_(in), p_(profile) {}

  double Work(const RankSpec& r, Op op, int64_t size) const {
    double work = 0;
    for (int s = r.first_segment; s < r.end_segment; ++s) {
      const SegmentCost c = p_.CostAt(*r.profile, s, size);
      switch (op) {
        case Op::kForward:
        case Op::kRecompute:
          work += c.forward_s;
          break;
        case Op::kForwardDiscard:
          work += c.forward_nograd_s;
          break;
        case Op::kBackward:
          work += c.backward_s;
          break;
        default:
          break;
      }
    }
    if ((op == Op::kForward || op == Op::kForwardDiscard) && (r.first || r.last)) {
      work += r.profile->sample_s * static_cast<double>(size);
    }
    return work;
  }

  // Bytes of the activations stage `stage` receives (the previous stage's output).
  int64_t InputBytes(const RankSpec& r, int64_t size) const {
    if (r.first_segment == 0) return 0;
    return p_.CostAt(*r.profile, r.first_segment - 1, size).output_bytes;
  }
  int64_t OutputBytes(const RankSpec& r, int64_t size) const {
    return p_.CostAt(*r.profile, r.end_segment - 1, size).output_bytes;
  }
  int64_t GraphBytes(const RankSpec& r, int64_t size) const {
    int64_t bytes = 0;
    for (int s = r.first_segment; s < r.end_segment; ++s) {
      bytes += p_.CostAt(*r.profile, s, size).graph_bytes;
    }
    return bytes;
  }

  // Processor sharing over `ranks` (indices into `specs`), which exchange messages only among
  // themselves. With `fixed_load`, a machine's speed is that for `fixed_load[m]` processes
  // whatever computes at the moment.
  std::vector<Timeline> Run(const std::vector<RankSpec>& specs, const std::vector<int>& ranks,
                            const std::vector<int>* fixed_load,
                            const std::vector<std::string>& addresses) const {
    const size_t n = ranks.size();
    std::vector<Timeline> out(n);
    struct State {
      size_t pc = 0;
      bool computing = false, done = false;
      double remaining = 0, op_start = 0;
      bool waiting = false;
      std::tuple<int, int, int, int> awaited;  // from, to, micro-batch, kind
    };
    std::vector<State> st(n);
    std::map<std::tuple<int, int, int, int>, double> arrivals;
    double t = kInf;
    for (int r : ranks) t = std::min(t, specs[r].start);
    size_t finished = 0;
    std::vector<int> computing_on(addresses.size(), 0);
    while (finished < n) {
      // Run every rank up to its next compute or blocking receive.
      for (size_t i = 0; i < n; ++i) {
        State& s = st[i];
        const RankSpec& r = specs[ranks[i]];
        if (s.done || s.computing || r.start > t + kEpsilon) continue;
        while (s.pc < r.list.size()) {
          const Instruction& ins = r.list[s.pc];
          const int64_t size = r.sizes[ins.micro_batch];
          if (ins.op == Op::kSendActivations || ins.op == Op::kSendGradients) {
            const bool forward = ins.op == Op::kSendActivations;
            const int peer = forward ? r.rank + 1 : r.rank - 1;  // the next / previous stage
            const int64_t bytes = forward ? OutputBytes(r, size) : InputBytes(r, size);
            arrivals[{r.rank, peer, ins.micro_batch, forward ? 0 : 1}] =
                t + p_.P2pSeconds(addresses[r.machine], addresses[specs[peer].machine], bytes);
            ++s.pc;
            continue;
          }
          if (ins.op == Op::kRecvActivations || ins.op == Op::kRecvGradients) {
            const bool forward = ins.op == Op::kRecvActivations;
            const int peer = forward ? r.rank - 1 : r.rank + 1;
            s.awaited = {peer, r.rank, ins.micro_batch, forward ? 0 : 1};
            auto it = arrivals.find(s.awaited);
            if (it != arrivals.end() && it->second <= t + kEpsilon) {
              s.waiting = false;
              ++s.pc;
              continue;
            }
            s.waiting = true;
            break;
          }
          s.remaining = Work(r, ins.op, size);
          s.computing = true;
          s.op_start = t;
          ++computing_on[r.machine];
          break;
        }
        if (!s.computing && !s.waiting && s.pc >= r.list.size()) {
          s.done = true;
          out[i].done = t;
          ++finished;
        }
      }
      if (finished == n) break;
      // The next event: a computation ends, a message arrives, a rank's step begins.
      double next = kInf;
      auto speed = [&](const RankSpec& r) {
        const int k = fixed_load ? (*fixed_load)[r.machine] : computing_on[r.machine];
        return r.profile->SpeedAt(std::max(1, k));
      };
      for (size_t i = 0; i < n; ++i) {
        const RankSpec& r = specs[ranks[i]];
        const State& s = st[i];
        if (s.computing) next = std::min(next, t + s.remaining / speed(r));
        if (s.waiting) {
          auto it = arrivals.find(s.awaited);
          if (it != arrivals.end()) next = std::min(next, it->second);
        }
        if (!s.done && !s.computing && !s.waiting && r.start > t) next = std::min(next, r.start);
      }
      if (next == kInf) break;  // cannot happen for the generated schedules (tested)
      const double dt = next - t;
      for (size_t i = 0; i < n; ++i) {
        State& s = st[i];
        if (!s.computing) continue;
        const RankSpec& r = specs[ranks[i]];
        s.remaining -= dt * speed(r);
        out[i].busy += dt;
        if (s.remaining > kEpsilon) continue;
        const Instruction& ins = r.list[s.pc];
        if (static_cast<int>(s.pc) == r.final_backward) {
          out[i].final_backward_start = s.op_start;
          out[i].final_backward_end = next;
        }
        if (in_.trace) {
          out[i].events.push_back(
              {std::string(OpName(ins.op)) + std::to_string(ins.micro_batch), s.op_start, next});
        }
        s.computing = false;
        ++s.pc;
      }
      std::fill(computing_on.begin(), computing_on.end(), 0);
      for (size_t i = 0; i < n; ++i) {
        if (st[i].computing) ++computing_on[specs[ranks[i]].machine];
      }
      t = next;
    }
    return out;
  }

 private:
  const SimulationInput& in_;
  const Profile& p_;
};

int Find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

}  // namespace

std::string Candidate::PartitionText() const {
  std::string out;
  for (int c : partition) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

std::string Candidate::ToString() const {
  std::ostringstream out;
  out << stages << " x " << replicas << ", micro-batch " << chunk_size << ", " << schedule
      << (recompute ? "+recompute" : "") << ", partition " << PartitionText();
  return out.str();
}

Result<Prediction> Simulate(const SimulationInput& in) {
  const Profile& p = *in.profile;
  const Candidate& c = in.candidate;
  const int P = c.stages, D = c.replicas, R = P * D;
  if (P < 1 || D < 1 || c.chunk_size < 1 || in.global_batch < 1) {
    return Status::InvalidArgument("a shape needs P, D, the micro-batch and the batch >= 1");
  }
  if (static_cast<int>(c.partition.size()) != P ||
      std::accumulate(c.partition.begin(), c.partition.end(), 0) != p.num_segments() ||
      *std::min_element(c.partition.begin(), c.partition.end()) < 1) {
    return Status::InvalidArgument("partition " + c.PartitionText() + " does not split the " +
                                   std::to_string(p.num_segments()) + " segments into " +
                                   std::to_string(P) + " stages");
  }
  if (NumMicroBatches(in.global_batch, c.chunk_size) < D) {
    return Status::InvalidArgument("a batch of " + std::to_string(in.global_batch) +
                                   " in micro-batches of " + std::to_string(c.chunk_size) +
                                   " cannot feed " + std::to_string(D) + " replicas");
  }
  if (static_cast<int>(in.rank_machines.size()) != R) {
    return Status::InvalidArgument("the shape has " + std::to_string(R) + " ranks but " +
                                   std::to_string(in.rank_machines.size()) + " machines were given");
  }
  auto kind = ParseScheduleKind(c.schedule);
  if (!kind.ok()) return kind.status();

  // Distinct machines, and how many ranks each holds.
  std::vector<std::string> addresses;
  std::map<std::string, int> machine_index;
  std::vector<int> load;
  std::vector<RankSpec> specs(R);
  std::vector<int> first_segment(P + 1, 0);
  for (int s = 0; s < P; ++s) first_segment[s + 1] = first_segment[s] + c.partition[s];
  StepModel model(in, p);
  for (int r = 0; r < R; ++r) {
    RankSpec& spec = specs[r];
    spec.rank = r;
    spec.stage = r % P;
    spec.replica = r / P;
    auto [it, added] = machine_index.emplace(in.rank_machines[r], static_cast<int>(addresses.size()));
    if (added) {
      addresses.push_back(in.rank_machines[r]);
      load.push_back(0);
    }
    spec.machine = it->second;
    ++load[spec.machine];
    spec.profile = &p.Machine(in.rank_machines[r]);
    spec.first_segment = first_segment[spec.stage];
    spec.end_segment = first_segment[spec.stage + 1];
    spec.first = spec.stage == 0;
    spec.last = spec.stage == P - 1;
    const BatchShare share = ShareOf(in.global_batch, c.chunk_size, D, spec.replica);
    for (int64_t m = 0; m < share.micro_batches; ++m) {
      const SampleRange range = MicroBatchSamples(in.global_batch, c.chunk_size,
                                                  share.first_micro_batch + m);
      spec.sizes.push_back(range.end - range.begin);
    }
    spec.list = BuildSchedule(*kind, P, spec.stage, static_cast<int>(share.micro_batches),
                              c.recompute);
    for (size_t i = 0; i < spec.list.size(); ++i) {
      if (spec.list[i].op == Op::kBackward) spec.final_backward = static_cast<int>(i);
    }
  }
  // Each rank's update, while every rank of its machine updates too; each step begins where
  // the previous step's update ended (the step's all-reduce released every rank at once).
  double earliest = kInf;
  for (RankSpec& spec : specs) {
    double work = 0;
    for (int s = spec.first_segment; s < spec.end_segment; ++s) work += spec.profile->segments[s].update_s;
    spec.update_s = work / spec.profile->SpeedAt(load[spec.machine]);
    earliest = std::min(earliest, spec.update_s);
  }
  for (RankSpec& spec : specs) spec.start = spec.update_s - earliest;

  // Replicas linked by a shared machine are simulated together.
  std::vector<int> parent(D);
  std::iota(parent.begin(), parent.end(), 0);
  std::vector<int> owner(addresses.size(), -1);
  for (const RankSpec& spec : specs) {
    if (owner[spec.machine] < 0) {
      owner[spec.machine] = spec.replica;
    } else {
      parent[Find(parent, spec.replica)] = Find(parent, owner[spec.machine]);
    }
  }
  std::map<int, std::vector<int>> groups;  // root replica -> its ranks
  for (const RankSpec& spec : specs) groups[Find(parent, spec.replica)].push_back(spec.rank);

  std::vector<Timeline> timeline(R);
  std::map<std::string, std::vector<Timeline>> memo;
  auto signature = [&](const std::vector<int>& ranks) {
    std::ostringstream key;
    std::map<int, int> relative;  // machine -> order of first use in the group
    for (int r : ranks) {
      const RankSpec& s = specs[r];
      auto [it, added] = relative.emplace(s.machine, static_cast<int>(relative.size()));
      key << s.stage << ':' << it->second << ':' << s.profile << ':' << load[s.machine] << ':'
          << s.start << ':';
      for (int64_t size : s.sizes) key << size << ',';
      key << ';';
    }
    return key.str();
  };
  for (const auto& [root, ranks] : groups) {
    std::vector<std::vector<int>> parts;
    const bool shared = static_cast<int>(ranks.size()) <= kMaxSharedRanks;
    if (shared) {
      parts.push_back(ranks);
    } else {  // replica by replica, each machine at its full load
      std::map<int, std::vector<int>> by_replica;
      for (int r : ranks) by_replica[specs[r].replica].push_back(r);
      for (auto& [replica, rs] : by_replica) parts.push_back(rs);
    }
    for (const std::vector<int>& part : parts) {
      const std::string key = (shared ? "s" : "f") + signature(part);
      auto it = in.trace ? memo.end() : memo.find(key);
      if (it == memo.end()) {
        it = memo.emplace(key, model.Run(specs, part, shared ? nullptr : &load, addresses)).first;
      }
      for (size_t i = 0; i < part.size(); ++i) timeline[part[i]] = it->second[i];
    }
  }

  // The data-parallel all-reduce of each stage, overlapped with the last backward, then the
  // buffers, then the step's all-reduce and every rank's update.
  std::vector<double> ready(R);
  for (int s = 0; s < P; ++s) {
    int64_t gradient_bytes = 0, buffer_bytes = 0;
    const MachineProfile& m = *specs[s].profile;
    for (int seg = first_segment[s]; seg < first_segment[s + 1]; ++seg) {
      gradient_bytes += m.segments[seg].parameter_bytes;
      buffer_bytes += m.segments[seg].buffer_bytes;
    }
    double last_start = 0, last_end = 0, done = 0;
    for (int d = 0; d < D; ++d) {
      const Timeline& t = timeline[d * P + s];
      last_start = std::max(last_start, t.final_backward_start);
      last_end = std::max(last_end, t.final_backward_end);
      done = std::max(done, t.done);
    }
    double reduced = done;
    if (D > 1) {
      reduced = std::max(
          {done, last_end + p.AllreduceSeconds(D, std::min(in.bucket_bytes, gradient_bytes)),
           last_start + p.AllreduceSeconds(D, gradient_bytes)});
      reduced += p.AllreduceSeconds(D, buffer_bytes);
    }
    for (int d = 0; d < D; ++d) ready[d * P + s] = std::max(timeline[d * P + s].done, reduced);
  }
  const double synced = *std::max_element(ready.begin(), ready.end()) + p.step_sync_s;

  Prediction out;
  out.step_s = synced + specs[0].update_s - specs[0].start;
  double span = 0, busy = 0, start = kInf;
  for (int r = 0; r < R; ++r) {
    span = std::max(span, timeline[r].done);
    start = std::min(start, specs[r].start);
    busy += timeline[r].busy;
  }
  span -= start;
  out.bubble_fraction = span > 0 ? std::max(0.0, 1.0 - busy / (R * span)) : 0.0;

  // Memory: parameters, their gradients, optimizer state and buffers, the data-parallel
  // buckets, and the peak of the activations the schedule keeps (replayed from the list).
  for (const RankSpec& spec : specs) {
    int64_t fixed = 0;
    for (int s = spec.first_segment; s < spec.end_segment; ++s) {
      const SegmentProfile& seg = spec.profile->segments[s];
      fixed += 2 * seg.parameter_bytes + seg.buffer_bytes + seg.optimizer_bytes +
               (D > 1 ? seg.parameter_bytes : 0);
    }
    int64_t held = 0, peak = 0;
    for (const Instruction& ins : spec.list) {
      const int64_t size = spec.sizes[ins.micro_batch];
      switch (ins.op) {
        case Op::kRecvActivations:
          held += model.InputBytes(spec, size);
          break;
        case Op::kForward:
        case Op::kRecompute:
          held += model.GraphBytes(spec, size);
          break;
        case Op::kBackward:
          held -= model.GraphBytes(spec, size);
          if (spec.first) held -= model.InputBytes(spec, size);
          break;
        case Op::kSendGradients:
          held -= model.InputBytes(spec, size);
          break;
        default:
          break;
      }
      peak = std::max(peak, held);
    }
    out.memory_bytes.push_back(fixed + peak);
    out.max_memory_bytes = std::max(out.max_memory_bytes, fixed + peak);
  }

  if (in.trace) {
    nlohmann::json events = nlohmann::json::array();
    auto event = [&](int r, const std::string& name, double from, double to) {
      events.push_back({{"name", name}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                        {"ts", from * 1e6}, {"dur", std::max(0.0, to - from) * 1e6}});
    };
    for (int r = 0; r < R; ++r) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                        {"args", {{"name", "rank " + std::to_string(r) + " (stage " +
                                               std::to_string(specs[r].stage) + ", replica " +
                                               std::to_string(specs[r].replica) + ")"}}}});
      for (const TraceEvent& e : timeline[r].events) event(r, e.name, e.start, e.end);
      if (ready[r] > timeline[r].done) event(r, "all-reduce", timeline[r].done, ready[r]);
      event(r, "update", synced, synced + specs[r].update_s);
    }
    out.trace = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  }
  return out;
}

}  // namespace mitra::planner
