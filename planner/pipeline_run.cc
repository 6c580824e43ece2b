#include "planner/pipeline_run.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>

namespace mitra::planner::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-12;

enum Kind { kActivations = 0, kGradients = 1 };

// The ranks of one RunPipelines call and the clock they share.
class PipelineRun {
 public:
  PipelineRun(const RankSet& ranks, const std::vector<int>& members,
              const std::vector<int>* fixed_load, const StageCosts& costs, const Profile& profile,
              bool trace);

  std::vector<Timeline> Run();

 private:
  // A message a member receives: its position in `members`, its kind, its slot (Slot).
  using Awaited = std::array<int, 3>;
  struct State {
    size_t pc = 0;
    bool computing = false, done = false;
    bool sending = false;  // what it computes is a send (LinkProfile::send_*), not the model
    double remaining = 0, op_start = 0;
    bool waiting = false;
    Awaited awaited{};
  };
  // What a member receives, by kind and slot: when it was sent, when the member asked for it,
  // and how long moving it takes once both have happened.
  struct Mailbox {
    std::array<std::vector<double>, 2> sent, posted, transfer;
  };

  const RankSpec& Spec(size_t i) const { return ranks_.specs[members_[i]]; }
  // A message's place in its receiver's mailbox: by the receiving chunk and the micro-batch.
  static int Slot(const RankSpec& r, int chunk, int micro_batch) {
    return chunk * static_cast<int>(r.sizes.size()) + micro_batch;
  }
  // Runs member i up to its next computation or a receive whose message has not arrived, and
  // marks it done at the end of its list.
  void RunUntilBlocked(size_t i);
  // Posts the message `ins` sends; returns the seconds the send takes its caller.
  double Send(const RankSpec& r, const Instruction& ins);
  // Whether member i's receive `ins` completes now; else it waits.
  bool Receive(size_t i, const Instruction& ins);
  double Arrival(const Awaited& a) const;
  double Speed(const RankSpec& r) const;
  // The next event: a computation ends, a message arrives, a rank's step begins; kInf: none.
  double NextEvent() const;
  // Advances the computations to `next` and ends those that are done there.
  void AdvanceTo(double next);

  const RankSet& ranks_;
  const std::vector<int>& members_;
  const std::vector<int>* fixed_load_;
  const StageCosts& costs_;
  const Profile& profile_;
  const bool trace_;
  std::vector<Timeline> out_;
  std::vector<State> state_;
  std::vector<Mailbox> mail_;
  std::map<int, size_t> local_;    // rank -> position in `members_`
  std::vector<int> computing_on_;  // by machine
  double t_ = kInf;
  size_t finished_ = 0;
};

PipelineRun::PipelineRun(const RankSet& ranks, const std::vector<int>& members,
                         const std::vector<int>* fixed_load, const StageCosts& costs,
                         const Profile& profile, bool trace)
    : ranks_(ranks), members_(members), fixed_load_(fixed_load), costs_(costs),
      profile_(profile), trace_(trace), out_(members.size()), state_(members.size()),
      mail_(members.size()), computing_on_(ranks.addresses.size(), 0) {
  for (size_t i = 0; i < members.size(); ++i) {
    const RankSpec& r = Spec(i);
    local_[r.rank] = i;
    const size_t slots = r.sizes.size() * r.chunks.size();
    for (int k = 0; k < 2; ++k) {
      mail_[i].sent[k].assign(slots, kInf);
      mail_[i].posted[k].assign(slots, kInf);
      mail_[i].transfer[k].assign(slots, 0.0);
    }
  }
  for (int r : members) t_ = std::min(t_, ranks.specs[r].start);
}

std::vector<Timeline> PipelineRun::Run() {
  const size_t n = members_.size();
  while (finished_ < n) {
    for (size_t i = 0; i < n; ++i) RunUntilBlocked(i);
    if (finished_ == n) break;
    const double next = NextEvent();
    if (next == kInf) break;  // cannot happen for the generated schedules (tested)
    AdvanceTo(next);
  }
  return std::move(out_);
}

void PipelineRun::RunUntilBlocked(size_t i) {
  State& s = state_[i];
  const RankSpec& r = Spec(i);
  if (s.done || s.computing || r.start > t_ + kEpsilon) return;
  while (s.pc < r.list.size()) {
    const Instruction& ins = r.list[s.pc];
    if (ins.op == Op::kRecvActivations || ins.op == Op::kRecvGradients) {
      if (!Receive(i, ins)) break;
      ++s.pc;
      continue;
    }
    s.sending = ins.op == Op::kSendActivations || ins.op == Op::kSendGradients;
    s.remaining = s.sending ? Send(r, ins) : costs_.Work(r, ins, r.sizes[ins.micro_batch]);
    if (s.sending && s.remaining <= 0) {  // a send that costs its caller nothing
      ++s.pc;
      continue;
    }
    s.computing = true;
    s.op_start = t_;
    ++computing_on_[r.machine];
    break;
  }
  if (!s.computing && !s.waiting && s.pc >= r.list.size()) {
    s.done = true;
    out_[i].done = t_;
    ++finished_;
  }
}

double PipelineRun::Send(const RankSpec& r, const Instruction& ins) {
  const int64_t size = r.sizes[ins.micro_batch];
  const bool forward = ins.op == Op::kSendActivations;
  const ChunkSpec& chunk = r.chunks[ins.chunk];
  // The rank and chunk of the virtual stage after this one / before it.
  const int peer = forward ? chunk.next_rank : chunk.prev_rank;
  const int peer_chunk = forward ? chunk.next_chunk : chunk.prev_chunk;
  const int64_t bytes =
      forward ? costs_.OutputBytes(r, ins.chunk, size) : costs_.InputBytes(r, ins.chunk, size);
  const RankSpec& to = ranks_.specs[ranks_.index[peer]];
  Mailbox& box = mail_[local_.at(peer)];
  const int k = forward ? kActivations : kGradients;
  const int slot = Slot(to, peer_chunk, ins.micro_batch);
  box.sent[k][slot] = t_;
  if (peer == r.rank) {  // the V's turn: the tensors stay in the rank's memory
    box.transfer[k][slot] = 0;
    return 0;
  }
  const std::string& from = ranks_.addresses[r.machine];
  const std::string& dst = ranks_.addresses[to.machine];
  box.transfer[k][slot] = profile_.P2pSeconds(from, dst, bytes, /*busy=*/true);
  return profile_.SendSeconds(from, dst, bytes);
}

bool PipelineRun::Receive(size_t i, const Instruction& ins) {
  State& s = state_[i];
  const int k = ins.op == Op::kRecvActivations ? kActivations : kGradients;
  const int slot = Slot(Spec(i), ins.chunk, ins.micro_batch);
  s.awaited = {static_cast<int>(i), k, slot};
  double& posted = mail_[i].posted[k][slot];
  posted = std::min(posted, t_);
  if (Arrival(s.awaited) <= t_ + kEpsilon) {
    if (trace_) out_[i].events.push_back({InstructionName(ins), posted, t_});
    s.waiting = false;
    return true;
  }
  s.waiting = true;
  return false;
}

double PipelineRun::Arrival(const Awaited& a) const {
  const Mailbox& box = mail_[a[0]];
  const double sent = box.sent[a[1]][a[2]];
  if (sent == kInf) return kInf;
  return std::max(sent, box.posted[a[1]][a[2]]) + box.transfer[a[1]][a[2]];
}

double PipelineRun::Speed(const RankSpec& r) const {
  const int k = fixed_load_ ? (*fixed_load_)[r.machine] : computing_on_[r.machine];
  return r.profile->SpeedAt(std::max(1, k));
}

double PipelineRun::NextEvent() const {
  double next = kInf;
  for (size_t i = 0; i < members_.size(); ++i) {
    const RankSpec& r = Spec(i);
    const State& s = state_[i];
    if (s.computing) next = std::min(next, t_ + s.remaining / Speed(r));
    if (s.waiting) next = std::min(next, Arrival(s.awaited));
    if (!s.done && !s.computing && !s.waiting && r.start > t_) next = std::min(next, r.start);
  }
  return next;
}

void PipelineRun::AdvanceTo(double next) {
  const double dt = next - t_;
  for (size_t i = 0; i < members_.size(); ++i) {
    State& s = state_[i];
    if (!s.computing) continue;
    const RankSpec& r = Spec(i);
    s.remaining -= dt * Speed(r);
    if (!s.sending) out_[i].busy += dt;
    if (s.remaining > kEpsilon) continue;
    const Instruction& ins = r.list[s.pc];
    if (static_cast<int>(s.pc) == r.final_backward) {
      out_[i].final_backward_start = s.op_start;
      out_[i].final_backward_end = next;
    }
    if (trace_) out_[i].events.push_back({InstructionName(ins), s.op_start, next});
    s.computing = false;
    ++s.pc;
  }
  std::fill(computing_on_.begin(), computing_on_.end(), 0);
  for (size_t i = 0; i < members_.size(); ++i) {
    if (state_[i].computing) ++computing_on_[Spec(i).machine];
  }
  t_ = next;
}

}  // namespace

std::vector<Timeline> RunPipelines(const RankSet& ranks, const std::vector<int>& members,
                                   const std::vector<int>* fixed_load, const StageCosts& costs,
                                   const Profile& profile, bool trace) {
  return PipelineRun(ranks, members, fixed_load, costs, profile, trace).Run();
}

}  // namespace mitra::planner::detail
