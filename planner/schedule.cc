#include "mitra/planner/schedule.h"

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
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zb-v") return ScheduleKind::kZbV;
  return Status::InvalidArgument("unknown schedule '" + name +
                                 "' (expected gpipe, 1f1b, varuna, zb-h1, interleaved or zb-v)");
}

const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kVaruna: return "varuna";
    case ScheduleKind::kZbH1: return "zb-h1";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZbV: return "zb-v";
  }
  return "?";
}

ChunkLayout LayoutOf(ScheduleKind kind, int num_stages, int ranges) {
  ChunkLayout layout;
  layout.stages = num_stages;
  if (kind == ScheduleKind::kInterleaved) {
    layout.chunks = InterleavedRanges(num_stages, ranges) ? ranges / num_stages : 2;
  }
  if (kind == ScheduleKind::kZbV) layout.chunks = 2;
  layout.v_shape = kind == ScheduleKind::kZbV;
  return layout;
}

bool InterleavedRanges(int num_stages, int ranges) {
  return num_stages >= 1 && ranges >= 2 * num_stages && ranges % num_stages == 0;
}

bool InterleavedFits(int num_stages, int num_micro_batches) {
  return num_micro_batches >= 1 && num_micro_batches % num_stages == 0;
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
  // `discard`: forwards keep no graph and are recomputed, just in time with `recompute_early`;
  // on the model's last virtual stage only with `discard_last` (a schedule whose backward
  // follows that forward at once has nothing to gain there).
  Builder(const ChunkLayout& layout, int stage, bool discard, bool recompute_early,
          bool discard_last = false)
      : layout_(layout), stage_(stage), discard_(discard), recompute_early_(recompute_early),
        discard_last_(discard_last) {}

  void Forward(int mb, int chunk = 0) {
    if (!First(chunk)) Emit(Op::kRecvActivations, mb, chunk);
    Emit(Discards(chunk) ? Op::kForwardDiscard : Op::kForward, mb, chunk);
    if (!Last(chunk)) Emit(Op::kSendActivations, mb, chunk);
  }

  // The whole backward, or with `split` its B (the W follows with Weights).
  void Backward(int mb, int chunk = 0, bool split = false) {
    const bool discard = Discards(chunk);
    if (discard && recompute_early_) Emit(Op::kRecompute, mb, chunk);
    if (!Last(chunk)) Emit(Op::kRecvGradients, mb, chunk);
    if (discard && !recompute_early_) Emit(Op::kRecompute, mb, chunk);
    Emit(split ? Op::kBackwardInput : Op::kBackward, mb, chunk);
    if (!First(chunk)) Emit(Op::kSendGradients, mb, chunk);
  }

  void Weights(int mb, int chunk = 0) { Emit(Op::kBackwardWeight, mb, chunk); }

  std::vector<Instruction> Take() { return std::move(out_); }

 private:
  bool First(int chunk) const { return layout_.VirtualStage(stage_, chunk) == 0; }
  bool Last(int chunk) const {
    return layout_.VirtualStage(stage_, chunk) == layout_.num_virtual_stages() - 1;
  }
  bool Discards(int chunk) const { return discard_ && (discard_last_ || !Last(chunk)); }
  void Emit(Op op, int mb, int chunk) { out_.emplace_back(op, mb, chunk); }

  ChunkLayout layout_;
  int stage_;
  bool discard_, recompute_early_, discard_last_;
  std::vector<Instruction> out_;
};

// 1F1B's order (schedule.h) on stage `stage`: P-s-1 warm-up forwards, then one forward and one
// backward alternately, then the remaining backwards; `backward(i)` emits micro-batch i's.
template <typename EmitBackward>
void OneFOneBOrder(Builder& b, int num_stages, int stage, int m, const EmitBackward& backward) {
  const int warmup = std::min(num_stages - stage - 1, m);
  for (int i = 0; i < warmup; ++i) b.Forward(i);
  for (int i = 0; i < m - warmup; ++i) {
    b.Forward(warmup + i);
    backward(i);
  }
  for (int i = m - warmup; i < m; ++i) backward(i);
}

// ZB-H1 (schedule.h): 1F1B's order with each backward split, stage s's W's each s micro-batches
// behind their B, the rest after the last B.
std::vector<Instruction> BuildZbH1(int num_stages, int stage, int m, bool recompute) {
  Builder b(LayoutOf(ScheduleKind::kZbH1, num_stages), stage, recompute,
            /*recompute_early=*/false);
  int next_weights = 0;
  OneFOneBOrder(b, num_stages, stage, m, [&](int i) {
    b.Backward(i, 0, /*split=*/true);
    if (i - stage >= next_weights) b.Weights(next_weights++);
  });
  while (next_weights < m) b.Weights(next_weights++);
  return b.Take();
}

// Interleaved 1F1B (schedule.h), in Megatron-LM's order; none unless M is a multiple of P.
std::vector<Instruction> BuildInterleaved(const ChunkLayout& layout, int stage, int m,
                                          bool recompute) {
  if (!InterleavedFits(layout.stages, m)) return {};
  const int P = layout.stages, v = layout.chunks, total = m * v;
  const auto micro_batch = [&](int k) { return (k / (P * v)) * P + k % P; };
  const auto forward_chunk = [&](int k) { return (k / P) % v; };
  const auto backward_chunk = [&](int k) { return v - 1 - (k / P) % v; };
  Builder b(layout, stage, recompute, /*recompute_early=*/false);
  const int warmup = std::min((P - stage - 1) * 2 + (v - 1) * P, total);
  for (int k = 0; k < warmup; ++k) b.Forward(micro_batch(k), forward_chunk(k));
  for (int k = 0; k < total - warmup; ++k) {
    b.Forward(micro_batch(warmup + k), forward_chunk(warmup + k));
    b.Backward(micro_batch(k), backward_chunk(k));
  }
  for (int k = total - warmup; k < total; ++k) b.Backward(micro_batch(k), backward_chunk(k));
  return b.Take();
}

// ZB-V (schedule.h): the positions run in lockstep over the V's virtual stages, one unit per
// F, B and W of a chunk, no transfer time.
std::vector<Instruction> BuildZbV(int num_stages, int stage, int m, bool recompute) {
  const ChunkLayout layout = LayoutOf(ScheduleKind::kZbV, num_stages);
  const int P = num_stages, v = layout.chunks, last = layout.num_virtual_stages() - 1;
  const size_t bound = 2 * static_cast<size_t>(P);  // chunk forwards awaiting B; weight stashes
  constexpr int kNever = std::numeric_limits<int>::max();
  struct Chunk {
    int next_forward = 0;
    std::deque<int> forwarded;  // F done, B not yet
  };
  struct Position {
    std::vector<Chunk> chunks;
    std::deque<std::pair<int, int>> weights;  // (chunk, micro-batch): B done, W not yet
    size_t in_flight = 0;                     // over its chunks' `forwarded`
    int done = 0;                             // W's done
  };
  std::vector<Position> st(P, Position{std::vector<Chunk>(v), {}, 0, 0});
  // By virtual stage and micro-batch: when its F can start, and when its B can.
  std::vector<std::vector<int>> activation(last + 1, std::vector<int>(m, kNever));
  std::vector<std::vector<int>> gradient(last + 1, std::vector<int>(m, kNever));
  for (int i = 0; i < m; ++i) activation[0][i] = 0;
  struct Step {
    Op op;
    int chunk, micro_batch;
  };
  std::vector<std::vector<Step>> order(P);
  const int limit = 6 * (m + P) * P * v;  // far past the end of any list these rules make
  for (int t = 0; t < limit && std::any_of(st.begin(), st.end(),
                                           [&](const Position& p) { return p.done < m * v; });
       ++t) {
    for (int s = 0; s < P; ++s) {
      Position& me = st[s];
      // The B whose gradient came first (the deeper virtual stage on a tie), and the forward
      // of the deepest chunk that can run one.
      int b_chunk = -1, f_chunk = -1;
      for (int c = 0; c < v; ++c) {
        const int j = layout.VirtualStage(s, c);
        const Chunk& ch = me.chunks[c];
        if (!ch.forwarded.empty() && gradient[j][ch.forwarded.front()] <= t) {
          const int since = gradient[j][ch.forwarded.front()];
          if (b_chunk < 0) {
            b_chunk = c;
          } else {
            const int jb = layout.VirtualStage(s, b_chunk);
            const int since_b = gradient[jb][me.chunks[b_chunk].forwarded.front()];
            if (since < since_b || (since == since_b && j > jb)) b_chunk = c;
          }
        }
        if (ch.next_forward < m && me.in_flight < bound && activation[j][ch.next_forward] <= t &&
            (f_chunk < 0 || j > layout.VirtualStage(s, f_chunk))) {
          f_chunk = c;
        }
      }
      if (!me.weights.empty() &&
          (me.weights.size() >= bound || (b_chunk < 0 && f_chunk < 0))) {
        const auto [c, i] = me.weights.front();
        me.weights.pop_front();
        ++me.done;
        order[s].push_back({Op::kBackwardWeight, c, i});
      } else if (b_chunk >= 0) {
        const int j = layout.VirtualStage(s, b_chunk);
        const int i = me.chunks[b_chunk].forwarded.front();
        me.chunks[b_chunk].forwarded.pop_front();
        --me.in_flight;
        me.weights.emplace_back(b_chunk, i);
        if (j > 0) gradient[j - 1][i] = t + 1;
        order[s].push_back({Op::kBackwardInput, b_chunk, i});
      } else if (f_chunk >= 0) {
        const int j = layout.VirtualStage(s, f_chunk);
        const int i = me.chunks[f_chunk].next_forward++;
        me.chunks[f_chunk].forwarded.push_back(i);
        ++me.in_flight;
        if (j < last) activation[j + 1][i] = t + 1;
        if (j == last) gradient[j][i] = t + 1;  // the loss is the last virtual stage's own
        order[s].push_back({Op::kForward, f_chunk, i});
      }
    }
  }
  Builder b(layout, stage, recompute, /*recompute_early=*/false);
  for (const Step& step : order[stage]) {
    if (step.op == Op::kForward) b.Forward(step.micro_batch, step.chunk);
    if (step.op == Op::kBackwardInput) b.Backward(step.micro_batch, step.chunk, /*split=*/true);
    if (step.op == Op::kBackwardWeight) b.Weights(step.micro_batch, step.chunk);
  }
  return b.Take();
}

}  // namespace

std::vector<Instruction> BuildSchedule(ScheduleKind kind, int num_stages, int stage,
                                       int num_micro_batches, bool recompute) {
  return BuildSchedule(kind, LayoutOf(kind, num_stages), stage, num_micro_batches, recompute);
}

std::vector<Instruction> BuildSchedule(ScheduleKind kind, const ChunkLayout& layout, int stage,
                                       int num_micro_batches, bool recompute) {
  const int m = num_micro_batches, num_stages = layout.stages;
  if (kind == ScheduleKind::kZbH1) return BuildZbH1(num_stages, stage, m, recompute);
  if (kind == ScheduleKind::kInterleaved) return BuildInterleaved(layout, stage, m, recompute);
  if (kind == ScheduleKind::kZbV) return BuildZbV(num_stages, stage, m, recompute);
  if (kind == ScheduleKind::kGPipe) {
    Builder b(layout, stage, recompute, /*recompute_early=*/false, /*discard_last=*/true);
    for (int i = 0; i < m; ++i) b.Forward(i);
    for (int i = 0; i < m; ++i) b.Backward(i);
    return b.Take();
  }
  // 1F1B and Varuna. On the last stage a micro-batch's backward directly follows its forward,
  // so there is nothing to gain from discarding activations there.
  const bool varuna = kind == ScheduleKind::kVaruna;
  Builder b(layout, stage, varuna || recompute, /*recompute_early=*/varuna);
  OneFOneBOrder(b, num_stages, stage, m, [&b](int i) { b.Backward(i); });
  return b.Take();
}

std::vector<Instruction> BuildForwardOnlySchedule(int num_stages, int stage, int num_micro_batches) {
  return BuildForwardOnlySchedule(LayoutOf(ScheduleKind::k1F1B, num_stages), stage,
                                  num_micro_batches);
}

std::vector<Instruction> BuildForwardOnlySchedule(const ChunkLayout& layout, int stage,
                                                  int num_micro_batches) {
  Builder b(layout, stage, /*discard=*/true, /*recompute_early=*/false, /*discard_last=*/true);
  for (int c = 0; c < layout.chunks; ++c) {
    for (int i = 0; i < num_micro_batches; ++i) b.Forward(i, c);
  }
  return b.Take();
}

std::string ToString(const std::vector<Instruction>& schedule) {
  std::string out;
  for (const auto& ins : schedule) {
    if (!out.empty()) out += ' ';
    out += InstructionName(ins);
  }
  return out;
}

std::string InstructionName(const Instruction& ins) {
  std::string name = OpName(ins.op) + std::to_string(ins.micro_batch);
  if (ins.chunk > 0) name += "." + std::to_string(ins.chunk);
  return name;
}

}  // namespace mitra::planner
