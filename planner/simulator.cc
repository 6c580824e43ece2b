#include "planner/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
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

  // A stage's costs at one micro-batch size (memoised: the same few sizes recur).
  struct StageCost {
    double forward = 0, nograd = 0, backward = 0;
    int64_t input_bytes = 0, output_bytes = 0, graph_bytes = 0;
  };
  const StageCost& Cost(const RankSpec& r, int64_t size) const {
    const auto key = std::make_tuple(r.profile, r.first_segment, r.end_segment, size);
    auto it = costs_.find(key);
    if (it != costs_.end()) return it->second;
    StageCost c;
    for (int s = r.first_segment; s < r.end_segment; ++s) {
      const SegmentCost seg = p_.CostAt(*r.profile, s, size);
      c.forward += seg.forward_s;
      c.nograd += seg.forward_nograd_s;
      c.backward += seg.backward_s;
      c.graph_bytes += seg.graph_bytes;
    }
    if (r.first || r.last) {  // a first or last stage loads the micro-batch's samples
      c.forward += r.profile->sample_s * static_cast<double>(size);
      c.nograd += r.profile->sample_s * static_cast<double>(size);
    }
    if (r.first_segment > 0) {
      c.input_bytes = p_.CostAt(*r.profile, r.first_segment - 1, size).output_bytes;
    }
    c.output_bytes = p_.CostAt(*r.profile, r.end_segment - 1, size).output_bytes;
    return costs_.emplace(key, c).first->second;
  }

  double Work(const RankSpec& r, Op op, int64_t size) const {
    const StageCost& c = Cost(r, size);
    switch (op) {
      case Op::kForward:
        return c.forward;
      case Op::kForwardDiscard:
        return c.nograd;
      case Op::kRecompute:  // no loading: the inputs are stashed
        return c.forward - ((r.first || r.last) ? r.profile->sample_s * static_cast<double>(size) : 0.0);
      case Op::kBackward:
        return c.backward;
      default:
        return 0;
    }
  }

  int64_t InputBytes(const RankSpec& r, int64_t size) const { return Cost(r, size).input_bytes; }
  int64_t OutputBytes(const RankSpec& r, int64_t size) const { return Cost(r, size).output_bytes; }
  int64_t GraphBytes(const RankSpec& r, int64_t size) const { return Cost(r, size).graph_bytes; }

  // Processor sharing over `ranks` (indices into `specs`), which exchange messages only among
  // themselves. With `fixed_load`, a machine's speed is that for `fixed_load[m]` processes
  // whatever computes at the moment.
  std::vector<Timeline> Run(const std::vector<RankSpec>& specs, const std::vector<int>& ranks,
                            const std::vector<int>* fixed_load,
                            const std::vector<std::string>& addresses,
                            const std::vector<int>& index) const {
    const size_t n = ranks.size();
    std::vector<Timeline> out(n);
    struct State {
      size_t pc = 0;
      bool computing = false, done = false;
      double remaining = 0, op_start = 0;
      bool waiting = false;
      std::array<int, 3> awaited{};  // receiving rank's position, kind, micro-batch
    };
    std::vector<State> st(n);
    // What rank i receives (kind 0: activations, 1: gradients), by micro-batch: when it was
    // sent, when i asked for it, and how long moving it takes. Gloo moves a message once both
    // sides have posted it (rendezvous), with the sender computing meanwhile: the busy link.
    struct Mailbox {
      std::array<std::vector<double>, 2> sent, posted, transfer;
    };
    std::vector<Mailbox> mail(n);
    std::map<int, size_t> local;  // rank -> position in `ranks`
    for (size_t i = 0; i < n; ++i) {
      const RankSpec& r = specs[ranks[i]];
      local[r.rank] = i;
      for (int k = 0; k < 2; ++k) {
        mail[i].sent[k].assign(r.sizes.size(), kInf);
        mail[i].posted[k].assign(r.sizes.size(), kInf);
        mail[i].transfer[k].assign(r.sizes.size(), 0.0);
      }
    }
    auto arrival = [&](const std::array<int, 3>& a) {
      const double sent = mail[a[0]].sent[a[1]][a[2]];
      if (sent == kInf) return kInf;
      return std::max(sent, mail[a[0]].posted[a[1]][a[2]]) + mail[a[0]].transfer[a[1]][a[2]];
    };
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
            Mailbox& box = mail[local.at(peer)];
            const int k = forward ? 0 : 1;
            box.sent[k][ins.micro_batch] = t;
            box.transfer[k][ins.micro_batch] = p_.P2pSeconds(
                addresses[r.machine], addresses[specs[index[peer]].machine], bytes, /*busy=*/true);
            ++s.pc;
            continue;
          }
          if (ins.op == Op::kRecvActivations || ins.op == Op::kRecvGradients) {
            const int k = ins.op == Op::kRecvActivations ? 0 : 1;
            s.awaited = {static_cast<int>(i), k, ins.micro_batch};
            double& posted = mail[i].posted[k][ins.micro_batch];
            posted = std::min(posted, t);
            if (arrival(s.awaited) <= t + kEpsilon) {
              if (in_.trace) {
                out[i].events.push_back(
                    {std::string(OpName(ins.op)) + std::to_string(ins.micro_batch), posted, t});
              }
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
        if (s.waiting) next = std::min(next, arrival(s.awaited));
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
  mutable std::map<std::tuple<const MachineProfile*, int, int, int64_t>, StageCost> costs_;
};

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

  // Which replicas to simulate: all of them, or on a large list of like machines (each of S
  // slots, the ranks filling them in order) only representatives. There the machines and the
  // replicas on them repeat every q = S / gcd(P, S) replicas, so a whole period of replicas
  // stands for every period whose replicas take as many micro-batches: the first period, the
  // ones around where the replicas with an extra micro-batch end, and the last.
  const int64_t micro_batches = NumMicroBatches(in.global_batch, c.chunk_size);
  const int extra = static_cast<int>(micro_batches % D);
  std::vector<int> replicas;
  {
    int slots = 0;
    while (slots < R && in.rank_machines[slots] == in.rank_machines[0]) ++slots;
    bool uniform = R > kRepresentativesAbove;
    const MachineProfile* typical = &p.Machine(in.rank_machines[0]);
    for (int r = 0; uniform && r < R; r += slots) {
      const int end = std::min(R, r + slots);
      uniform = &p.Machine(in.rank_machines[r]) == typical &&
                in.rank_machines[end - 1] == in.rank_machines[r] &&
                (end == R || in.rank_machines[end] != in.rank_machines[r]);
    }
    if (!uniform) {
      replicas.resize(D);
      std::iota(replicas.begin(), replicas.end(), 0);
    } else {
      const int q = slots / std::gcd(P, slots);
      std::set<int> chosen;
      auto window = [&](int start) {
        start = std::max(0, std::min(start, D - 1)) / q * q;
        for (int d = start; d < std::min(D, start + q); ++d) chosen.insert(d);
      };
      window(0);
      window(extra - 1);
      window(extra);
      window((extra + q - 1) / q * q);
      window(D - 1);
      window(D - 1 - q);  // the last full period, before a partly filled last machine
      replicas.assign(chosen.begin(), chosen.end());
    }
  }

  // Distinct machines, and how many ranks each holds.
  std::vector<std::string> addresses;
  std::map<std::string, int> machine_index;
  std::map<int, int> load;  // machine -> ranks on it
  std::vector<int> index(R, -1);  // rank -> its spec, when simulated
  std::vector<RankSpec> specs;
  specs.reserve(replicas.size() * P);
  std::vector<int> first_segment(P + 1, 0);
  for (int s = 0; s < P; ++s) first_segment[s + 1] = first_segment[s] + c.partition[s];
  StepModel model(in, p);
  std::map<std::tuple<int, int64_t>, std::vector<Instruction>> lists;  // (stage, M) -> list
  for (int d : replicas) {
    const BatchShare share = ShareOf(in.global_batch, c.chunk_size, D, d);
    for (int stage = 0; stage < P; ++stage) {
      const int r = d * P + stage;
      index[r] = static_cast<int>(specs.size());
      RankSpec& spec = specs.emplace_back();
      spec.rank = r;
      spec.stage = stage;
      spec.replica = d;
      auto [it, added] = machine_index.emplace(in.rank_machines[r], static_cast<int>(addresses.size()));
      if (added) addresses.push_back(in.rank_machines[r]);
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
        list = BuildSchedule(*kind, P, stage, static_cast<int>(share.micro_batches), c.recompute);
      }
      spec.list = list;
      for (size_t i = 0; i < spec.list.size(); ++i) {
        if (spec.list[i].op == Op::kBackward) spec.final_backward = static_cast<int>(i);
      }
    }
  }
  // A machine's load: the ranks on it, counted over every rank (a representative's machine
  // holds as many as its period's).
  std::vector<int> machine_load(addresses.size(), 0);
  for (const RankSpec& spec : specs) {  // ranks fill a machine's slots consecutively
    if (machine_load[spec.machine] > 0) continue;
    int lo = spec.rank, hi = spec.rank;
    while (lo > 0 && in.rank_machines[lo - 1] == in.rank_machines[spec.rank]) --lo;
    while (hi + 1 < R && in.rank_machines[hi + 1] == in.rank_machines[spec.rank]) ++hi;
    machine_load[spec.machine] = hi - lo + 1;
  }
  // Each rank's update, while every rank of its machine updates too; each step begins where
  // the previous step's update ended (the step's all-reduce released every rank at once).
  double earliest = kInf;
  for (RankSpec& spec : specs) {
    double work = 0;
    for (int s = spec.first_segment; s < spec.end_segment; ++s) work += spec.profile->segments[s].update_s;
    spec.update_s = work / spec.profile->SpeedAt(machine_load[spec.machine]);
    earliest = std::min(earliest, spec.update_s);
  }
  for (RankSpec& spec : specs) spec.start = spec.update_s - earliest;

  // Replicas linked by a shared machine are simulated together.
  std::map<int, int> parent;  // replica -> parent replica
  for (int d : replicas) parent[d] = d;
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<int> owner(addresses.size(), -1);
  for (const RankSpec& spec : specs) {
    if (owner[spec.machine] < 0) {
      owner[spec.machine] = spec.replica;
    } else {
      parent[find(spec.replica)] = find(owner[spec.machine]);
    }
  }
  std::map<int, std::vector<int>> groups;  // root replica -> its specs
  for (size_t i = 0; i < specs.size(); ++i) groups[find(specs[i].replica)].push_back(static_cast<int>(i));

  std::vector<Timeline> timeline(specs.size());
  std::map<std::string, std::vector<Timeline>> memo;
  auto signature = [&](const std::vector<int>& members) {
    std::ostringstream key;
    std::map<int, int> relative;  // machine -> order of first use in the group
    for (int i : members) {
      const RankSpec& s = specs[i];
      auto [it, added] = relative.emplace(s.machine, static_cast<int>(relative.size()));
      key << s.stage << ':' << it->second << ':' << s.profile << ':' << machine_load[s.machine]
          << ':' << s.start << ':';
      for (int64_t size : s.sizes) key << size << ',';
      key << ';';
    }
    return key.str();
  };
  for (const auto& [root, members] : groups) {
    std::vector<std::vector<int>> parts;
    const bool shared = static_cast<int>(members.size()) <= kMaxSharedRanks;
    if (shared) {
      parts.push_back(members);
    } else {  // replica by replica, each machine at its full load
      std::map<int, std::vector<int>> by_replica;
      for (int i : members) by_replica[specs[i].replica].push_back(i);
      for (auto& [replica, rs] : by_replica) parts.push_back(rs);
    }
    for (const std::vector<int>& part : parts) {
      const std::string key = (shared ? "s" : "f") + signature(part);
      auto it = in.trace ? memo.end() : memo.find(key);
      if (it == memo.end()) {
        it = memo.emplace(key, model.Run(specs, part, shared ? nullptr : &machine_load, addresses, index))
                 .first;
      }
      for (size_t i = 0; i < part.size(); ++i) timeline[part[i]] = it->second[i];
    }
  }

  // The data-parallel all-reduce of each stage, overlapped with the last backward, then the
  // buffers, then the step's all-reduce and every rank's update.
  std::vector<double> ready(specs.size());
  for (int s = 0; s < P; ++s) {
    int64_t gradient_bytes = 0, buffer_bytes = 0;
    const MachineProfile& m = *specs[index[s]].profile;
    for (int seg = first_segment[s]; seg < first_segment[s + 1]; ++seg) {
      gradient_bytes += m.segments[seg].parameter_bytes;
      buffer_bytes += m.segments[seg].buffer_bytes;
    }
    double last_start = 0, last_end = 0, done = 0;
    for (int d : replicas) {
      const Timeline& t = timeline[index[d * P + s]];
      last_start = std::max(last_start, t.final_backward_start);
      last_end = std::max(last_end, t.final_backward_end);
      done = std::max(done, t.done);
    }
    double reduced = done;
    if (D > 1) {
      const double measured = p.AllreduceAfterCompute(D, gradient_bytes);
      if (measured >= 0) {  // as measured with the cores busy
        reduced = std::max(done, last_end + measured);
      } else {  // the buckets overlap the last backward
        reduced = std::max(
            {done, last_end + p.AllreduceSeconds(D, std::min(in.bucket_bytes, gradient_bytes)),
             last_start + p.AllreduceSeconds(D, gradient_bytes)});
      }
      reduced += p.AllreduceSeconds(D, buffer_bytes);
    }
    for (int d : replicas) {
      const int i = index[d * P + s];
      ready[i] = std::max(timeline[i].done, reduced);
    }
  }
  const double synced = *std::max_element(ready.begin(), ready.end()) + p.step_sync_s;

  Prediction out;
  out.step_s = synced + specs[index[0]].update_s - specs[index[0]].start;
  double span = 0, busy = 0, start = kInf;
  for (size_t i = 0; i < specs.size(); ++i) {
    span = std::max(span, timeline[i].done);
    start = std::min(start, specs[i].start);
    busy += timeline[i].busy;
  }
  span -= start;
  out.bubble_fraction =
      span > 0 ? std::max(0.0, 1.0 - busy / (static_cast<double>(specs.size()) * span)) : 0.0;

  // Memory: parameters, their gradients, optimizer state and buffers, the data-parallel
  // buckets, and the peak of the activations the schedule keeps (replayed from the list).
  // Ranks not simulated hold what their period's representative holds.
  std::map<std::tuple<int, int64_t, const MachineProfile*>, int64_t> peak_of;
  std::vector<int64_t> spec_memory(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const RankSpec& spec = specs[i];
    int64_t fixed = 0;
    for (int s = spec.first_segment; s < spec.end_segment; ++s) {
      const SegmentProfile& seg = spec.profile->segments[s];
      fixed += 2 * seg.parameter_bytes + seg.buffer_bytes + seg.optimizer_bytes +
               (D > 1 ? seg.parameter_bytes : 0);
    }
    auto key = std::make_tuple(spec.stage, static_cast<int64_t>(spec.sizes.size()), spec.profile);
    auto found = peak_of.find(key);
    if (found == peak_of.end()) {
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
            break;
          case Op::kSendGradients:
            held -= model.InputBytes(spec, size);
            break;
          default:
            break;
        }
        peak = std::max(peak, held);
      }
      found = peak_of.emplace(key, peak).first;
    }
    spec_memory[i] = fixed + found->second;
    out.max_memory_bytes = std::max(out.max_memory_bytes, spec_memory[i]);
  }
  out.memory_bytes.assign(R, 0);
  for (int r = 0; r < R; ++r) {
    if (index[r] >= 0) out.memory_bytes[r] = spec_memory[index[r]];
  }
  for (int r = 0; r < R; ++r) {  // not simulated: the same stage of replica 0 or the first chosen
    if (out.memory_bytes[r] == 0) out.memory_bytes[r] = out.memory_bytes[(r % P) + replicas.front() * P];
  }

  if (in.trace) {
    nlohmann::json events = nlohmann::json::array();
    auto event = [&](int r, const std::string& name, double from, double to) {
      events.push_back({{"name", name}, {"ph", "X"}, {"pid", 0}, {"tid", r},
                        {"ts", from * 1e6}, {"dur", std::max(0.0, to - from) * 1e6}});
    };
    for (size_t i = 0; i < specs.size(); ++i) {
      const int r = specs[i].rank;
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                        {"args", {{"name", "rank " + std::to_string(r) + " (stage " +
                                               std::to_string(specs[i].stage) + ", replica " +
                                               std::to_string(specs[i].replica) + ")"}}}});
      for (const TraceEvent& e : timeline[i].events) event(r, e.name, e.start, e.end);
      if (ready[i] > timeline[i].done) event(r, "reduce", timeline[i].done, ready[i]);
      event(r, "update", synced, synced + specs[i].update_s);
      for (const TraceEvent& e : timeline[i].events) out.ops.push_back({r, e.name, e.start, e.end});
      out.ops.push_back({r, "reduce", timeline[i].done, ready[i]});
      out.ops.push_back({r, "update", synced, synced + specs[i].update_s});
    }
    out.trace = nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  }
  return out;
}

}  // namespace mitra::planner
