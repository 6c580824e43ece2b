#include "planner/schedule.h"

#include <algorithm>

namespace mitra::planner {

Result<ScheduleKind> ParseScheduleKind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "varuna") return ScheduleKind::kVaruna;
  return Status::InvalidArgument("unknown schedule '" + name + "' (expected gpipe, 1f1b or varuna)");
}

const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kVaruna: return "varuna";
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

  void Backward(int mb) {
    if (discard_ && recompute_early_) Emit(Op::kRecompute, mb);
    if (!last_) Emit(Op::kRecvGradients, mb);
    if (discard_ && !recompute_early_) Emit(Op::kRecompute, mb);
    Emit(Op::kBackward, mb);
    if (!first_) Emit(Op::kSendGradients, mb);
  }

  std::vector<Instruction> Take() { return std::move(out_); }

 private:
  void Emit(Op op, int mb) { out_.push_back({op, mb}); }

  bool first_, last_, discard_, recompute_early_;
  std::vector<Instruction> out_;
};

}  // namespace

std::vector<Instruction> BuildSchedule(ScheduleKind kind, int num_stages, int stage,
                                       int num_micro_batches, bool recompute) {
  const bool last = stage == num_stages - 1;
  const int m = num_micro_batches;
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
