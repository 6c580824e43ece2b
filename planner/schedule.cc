#include "planner/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

namespace mitra::planner {

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "varuna") return ScheduleKind::kVaruna;
  if (name == "zb-h1") return ScheduleKind::kZbH1;
  return Status::InvalidArgument("unknown schedule '" + name +
                                 "' (expected gpipe, 1f1b, varuna or zb-h1)");
}

const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kVaruna: return "varuna";
    case ScheduleKind::kZbH1: return "zb-h1";
  }
  return "?";
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kRecvActivations: return "Ra";
    case Op::kForward: return "F";
    case Op::kForwardDiscard: return "f";
    case Op::kSendActivations: return "Sa";
    case Op::kRecvGradients: return "Rg";
    case Op::kRecompute: return "R";
    case Op::kBackward: return "B";
    case Op::kSendGradients: return "Sg";
    case Op::kBackwardInput: return "Bi";
    case Op::kBackwardWeight: return "W";
  }
  return "?";
}

namespace {

class Builder {
 public:
  Builder(int num_stages, int stage, bool discard, bool recompute_early)
      : first_(stage == 0), last_(stage == num_stages - 1), discard_(discard),
        recompute_early_(recompute_early) {}

  void Forward(int mb) {
    if (!first_) Emit(Op::kRecvActivations, mb);
    Emit(discard_ ? Op::kForwardDiscard : Op::kForward, mb);
    if (!last_) Emit(Op::kSendActivations, mb);
  }

  // The whole backward, or with `split` its B (the W follows with Weights).
  void Backward(int mb, bool split = false) {
    if (discard_ && recompute_early_) Emit(Op::kRecompute, mb);
    if (!last_) Emit(Op::kRecvGradients, mb);
    if (discard_ && !recompute_early_) Emit(Op::kRecompute, mb);
    Emit(split ? Op::kBackwardInput : Op::kBackward, mb);
    if (!first_) Emit(Op::kSendGradients, mb);
  }

  void Weights(int mb) { Emit(Op::kBackwardWeight, mb); }

  std::vector<Instruction> Take() { return std::move(out_); }

 private:
  void Emit(Op op, int mb) { out_.push_back({op, mb}); }

  bool first_, last_, discard_, recompute_early_;
  std::vector<Instruction> out_;
};

// ZB-H1 (schedule.h): every stage run in lockstep, one unit per F, B and W, no transfer time.
std::vector<Instruction> BuildZbH1(int num_stages, int stage, int m, bool recompute) {
  const int P = num_stages;
  constexpr int kNever = std::numeric_limits<int>::max();
  struct State {
    int next_forward = 0;
    std::deque<int> forwarded;  // F done, B not yet
    std::deque<int> weights;    // B done, W not yet
    int done = 0;               // W's done
  };
  std::vector<State> st(P);
  // activation[s][i]: when stage s can start micro-batch i's F; gradient[s][i]: its B.
  std::vector<std::vector<int>> activation(P, std::vector<int>(m, kNever));
  std::vector<std::vector<int>> gradient(P, std::vector<int>(m, kNever));
  for (int i = 0; i < m; ++i) activation[0][i] = 0;
  std::vector<std::vector<std::pair<Op, int>>> order(P);
  const int limit = 3 * (m + P) * P;  // far past the end of any list these rules make
  for (int t = 0;
       t < limit && std::any_of(st.begin(), st.end(), [&](const State& s) { return s.done < m; });
       ++t) {
    for (int s = 0; s < P; ++s) {
      State& me = st[s];
      const bool b_ready = !me.forwarded.empty() && gradient[s][me.forwarded.front()] <= t;
      const bool f_ready = me.next_forward < m &&
                           static_cast<int>(me.forwarded.size()) < P - s &&
                           activation[s][me.next_forward] <= t;
      const bool w_due = static_cast<int>(me.weights.size()) >= P;
      if (!me.weights.empty() && (w_due || (!b_ready && !f_ready))) {
        order[s].push_back({Op::kBackwardWeight, me.weights.front()});
        me.weights.pop_front();
        ++me.done;
      } else if (b_ready) {
        const int i = me.forwarded.front();
        me.forwarded.pop_front();
        me.weights.push_back(i);
        if (s > 0) gradient[s - 1][i] = t + 1;
        order[s].push_back({Op::kBackwardInput, i});
      } else if (f_ready) {
        const int i = me.next_forward++;
        me.forwarded.push_back(i);
        if (s + 1 < P) activation[s + 1][i] = t + 1;
        if (s == P - 1) gradient[s][i] = t + 1;  // the loss is the last stage's own
        order[s].push_back({Op::kForward, i});
      }
    }
  }
  Builder b(num_stages, stage, recompute && stage != P - 1, /*recompute_early=*/false);
  for (const auto& [op, i] : order[stage]) {
    if (op == Op::kForward) b.Forward(i);
    if (op == Op::kBackwardInput) b.Backward(i, /*split=*/true);
    if (op == Op::kBackwardWeight) b.Weights(i);
  }
  return b.Take();
}

}  // namespace

std::vector<Instruction> BuildSchedule(ScheduleKind kind, int num_stages, int stage,
                                       int num_micro_batches, bool recompute) {
  const bool last = stage == num_stages - 1;
  const int m = num_micro_batches;
  if (kind == ScheduleKind::kZbH1) return BuildZbH1(num_stages, stage, m, recompute);
  if (kind == ScheduleKind::kGPipe) {
    Builder b(num_stages, stage, recompute, /*recompute_early=*/false);
    for (int i = 0; i < m; ++i) b.Forward(i);
    for (int i = 0; i < m; ++i) b.Backward(i);
    return b.Take();
  }
  // 1F1B and Varuna. On the last stage a micro-batch's backward directly follows its forward,
  // so there is nothing to gain from discarding activations there.
  const bool varuna = kind == ScheduleKind::kVaruna;
  const bool discard = (varuna || recompute) && !last;
  Builder b(num_stages, stage, discard, /*recompute_early=*/varuna);
  const int warmup = std::min(num_stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) b.Forward(i);
  for (int i = 0; i < m - warmup; ++i) {
    b.Forward(warmup + i);
    b.Backward(i);
  }
  for (int i = m - warmup; i < m; ++i) b.Backward(i);
  return b.Take();
}

std::vector<Instruction> BuildForwardOnlySchedule(int num_stages, int stage, int num_micro_batches) {
  Builder b(num_stages, stage, /*discard=*/true, /*recompute_early=*/false);
  for (int i = 0; i < num_micro_batches; ++i) b.Forward(i);
  return b.Take();
}

std::string ToString(const std::vector<Instruction>& schedule) {
  std::string out;
  for (const auto& ins : schedule) {
    if (!out.empty()) out += ' ';
    out += OpName(ins.op) + std::to_string(ins.micro_batch);
  }
  return out;
}

}  // namespace mitra::planner
