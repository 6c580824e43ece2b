#include "worker/step/pipeline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_set>
#include <utility>

#include <torch/torch.h>

#include "mitra/cutpoint/linear.h"

namespace mitra::worker {
namespace {

using cutpoint::Activations;
using planner::Op;

enum Tag { kActivationTag = 0, kGradientTag = 1 };
// Edge e joins virtual stages e and e + 1: its activations go down it, its gradients back up.
int TagOf(int micro_batch, int edge, int edges, Tag kind) {
  return (micro_batch * edges + edge) * 2 + kind;
}

struct MicroBatchState {
  Activations batch;   // the data (first and last stages)
  Activations inputs;  // what the stage's forward consumed (stashed for backward/recompute)
  Activations outputs;
  torch::Tensor loss;  // last stage
  std::vector<torch::Tensor> output_grads;
  std::vector<torch::Tensor> buffers_seen;  // buffers before a forward that will be recomputed
};

class Executor {
 public:
  // `metrics` non-null: an evaluation pass (forward only, sums of loss and metrics).
  // `split`: the schedule runs each backward as a B and a W (mitra/cutpoint/linear.h).
  Executor(const PipelineContext& ctx, int num_micro_batches, const MicroBatchFn& micro_batch,
           const std::vector<MetricFn>* metrics = nullptr, bool split = false)
      : ctx_(ctx), split_(split), edges_(std::max(1, ctx.num_virtual_stages - 1)),
        micro_batch_(micro_batch), metrics_(metrics),
        sums_(metrics ? metrics->size() + 1 : 0, 0.0) {
    for (const ChunkLinks& links : ctx.chunks) {
      chunks_.push_back({links, links.prev_rank < 0, links.next_rank < 0,
                         std::vector<MicroBatchState>(num_micro_batches),
                         std::vector<cutpoint::WeightGradients>(num_micro_batches)});
    }
  }

  // Posts the receives of the next activation messages from other ranks in `schedule`, from
  // `next` on, ahead of their instructions (Comm::ExpectActivations): at most
  // planner::kActivationReceivesAhead posted and not yet taken, each holding a message's tensors.
  void PostAhead(const std::vector<planner::Instruction>& schedule, size_t next) {
    ahead_cursor_ = std::max(ahead_cursor_, next);
    for (; ahead_cursor_ < schedule.size() &&
           activations_ahead_ < planner::kActivationReceivesAhead;
         ++ahead_cursor_) {
      const planner::Instruction& ins = schedule[ahead_cursor_];
      if (ins.op != Op::kRecvActivations) continue;
      const ChunkLinks& links = chunks_[ins.chunk].links;
      if (Own(links.prev_rank)) continue;
      ctx_.comm->ExpectActivations(links.prev_rank,
                                   Tag(ins.micro_batch, links.virtual_stage - 1, kActivationTag));
      ++activations_ahead_;
    }
  }

  // `final_backward`: the chunk's last B (or backward) of the step; `final_weights`: its last W.
  void Execute(const planner::Instruction& ins, bool final_backward, bool final_weights = false) {
    Chunk& chunk = chunks_[ins.chunk];
    MicroBatchState& mb = chunk.mbs[ins.micro_batch];
    switch (ins.op) {
      case Op::kRecvActivations:
        mb.inputs = ReceiveActivations(chunk, ins.micro_batch);
        if (metrics_ == nullptr) {
          for (auto& [name, t] : mb.inputs) {
            if (t.is_floating_point()) t.requires_grad_(true);
          }
        }
        break;
      case Op::kForward:
      case Op::kForwardDiscard: {
        if (chunk.first || chunk.last) mb.batch = micro_batch_(ins.micro_batch);
        if (chunk.first) mb.inputs = mb.batch;
        const bool discard = ins.op == Op::kForwardDiscard;
        torch::AutoGradMode grad_mode(!discard);
        if (discard && metrics_ == nullptr && !ctx_.stage->buffers().empty()) {
          mb.buffers_seen = ctx_.stage->CopyBuffers();
        }
        Forward(chunk, mb, ins);
        if (metrics_ == nullptr) {
          if (chunk.last) AddLoss(mb.loss);
        } else if (chunk.last) {
          Accumulate(mb);
          mb = MicroBatchState();
        }
        break;
      }
      case Op::kRecompute:
        if (!mb.buffers_seen.empty()) {
          const std::vector<torch::Tensor> now = ctx_.stage->CopyBuffers();
          ctx_.stage->RestoreBuffers(mb.buffers_seen);
          Forward(chunk, mb, ins);
          ctx_.stage->RestoreBuffers(now);
          mb.buffers_seen.clear();
        } else {
          Forward(chunk, mb, ins);
        }
        break;
      case Op::kSendActivations:
        SendActivations(chunk, ins.micro_batch, mb.outputs);
        if (metrics_ == nullptr) {
          ExpectGradients(chunk, ins.micro_batch, mb.outputs);
        } else {
          mb = MicroBatchState();
        }
        break;
      case Op::kRecvGradients:
        mb.output_grads = ReceiveGradients(chunk, ins.micro_batch, mb.outputs);
        break;
      case Op::kBackward:
        if (final_backward && ctx_.reducer) ctx_.reducer->Arm(ctx_.stage->ChunkParameters(ins.chunk));
        Backward(chunk, mb);
        break;
      case Op::kBackwardInput: {
        cutpoint::WeightGradients& weights = chunk.weights[ins.micro_batch];
        {
          cutpoint::DeferWeightGradients defer(&weights);
          Backward(chunk, mb);
        }
        pending_.push_back(&weights);
        // Whole now: the chunk's gradients but those the W's still add to (GradReducer's comment).
        if (final_backward && ctx_.reducer) ctx_.reducer->Fill(WholeAfterB(ins.chunk));
        break;
      }
      case Op::kBackwardWeight: {
        cutpoint::WeightGradients& weights = chunk.weights[ins.micro_batch];
        pending_.erase(std::find(pending_.begin(), pending_.end(), &weights));
        if (final_weights && ctx_.reducer) {
          weights.Run([this](const std::vector<torch::Tensor>& whole) { ctx_.reducer->Fill(whole); });
        } else {
          weights.Run();
        }
        break;
      }
      case Op::kSendGradients: {
        std::vector<torch::Tensor> grads;
        for (const auto& [name, t] : mb.inputs) {
          if (!t.is_floating_point()) continue;
          grads.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
        }
        SendGradients(chunk, ins.micro_batch, std::move(grads));
        mb = MicroBatchState();
        break;
      }
    }
  }

  // Summed in double on the stage's device and read once, at the end of the step: reading each
  // micro-batch's loss would wait for a GPU to finish its forward before the backward is queued.
  double loss_sum() const { return loss_sum_.defined() ? loss_sum_.item<double>() : 0.0; }
  const std::vector<double>& sums() const { return sums_; }

 private:
  // A chunk of the stage (several under interleaved and zb-v): its neighbours and its
  // micro-batches' state.
  struct Chunk {
    ChunkLinks links;
    bool first, last;  // the model's first and last virtual stage
    std::vector<MicroBatchState> mbs;
    std::vector<cutpoint::WeightGradients> weights;  // by micro-batch: what its B left for its W
  };
  // What messages from a neighbouring chunk of this rank carry, by (edge, micro-batch).
  template <typename T>
  using Local = std::map<std::pair<int, int>, T>;

  bool Own(int rank) const { return rank == ctx_.rank; }
  int Tag(int micro_batch, int edge, Tag kind) const {
    return TagOf(micro_batch, edge, edges_, kind);
  }

  Activations ReceiveActivations(Chunk& chunk, int micro_batch) {
    const int edge = chunk.links.virtual_stage - 1;
    if (!Own(chunk.links.prev_rank)) {
      --activations_ahead_;
      return ctx_.comm->RecvActivations(chunk.links.prev_rank,
                                        Tag(micro_batch, edge, kActivationTag));
    }
    // In memory from the chunk before: detached, as the names of a message's activations.
    Activations acts = std::move(local_activations_.at({edge, micro_batch}));
    local_activations_.erase({edge, micro_batch});
    for (auto& [name, t] : acts) t = t.detach();
    return acts;
  }

  void SendActivations(const Chunk& chunk, int micro_batch, const Activations& outputs) {
    const int edge = chunk.links.virtual_stage;
    if (Own(chunk.links.next_rank)) {
      local_activations_[{edge, micro_batch}] = outputs;
    } else {
      ctx_.comm->SendActivations(outputs, chunk.links.next_rank,
                                 Tag(micro_batch, edge, kActivationTag));
    }
  }

  // The gradients of `outputs`, sent to the next stage, will come back: their receive is posted
  // now (Comm::ExpectTensors), their shapes being those of the outputs.
  void ExpectGradients(const Chunk& chunk, int micro_batch, const Activations& outputs) {
    if (Own(chunk.links.next_rank)) return;
    std::vector<torch::Tensor> like;
    for (const auto& [name, t] : outputs) {
      if (t.is_floating_point()) like.push_back(t);
    }
    ctx_.comm->ExpectTensors(like, chunk.links.next_rank,
                             Tag(micro_batch, chunk.links.virtual_stage, kGradientTag));
  }

  // The gradients of `outputs`, one per floating tensor in name order.
  std::vector<torch::Tensor> ReceiveGradients(const Chunk& chunk, int micro_batch,
                                              const Activations& outputs) {
    const int edge = chunk.links.virtual_stage;
    if (!Own(chunk.links.next_rank)) {
      ExpectGradients(chunk, micro_batch, outputs);  // posted when they were sent: nothing to do
      return ctx_.comm->TakeTensors(chunk.links.next_rank, Tag(micro_batch, edge, kGradientTag),
                                    "gradients of micro-batch " + std::to_string(micro_batch));
    }
    std::vector<torch::Tensor> grads = std::move(local_gradients_.at({edge, micro_batch}));
    local_gradients_.erase({edge, micro_batch});
    return grads;
  }

  void SendGradients(const Chunk& chunk, int micro_batch, std::vector<torch::Tensor> grads) {
    const int edge = chunk.links.virtual_stage - 1;
    if (Own(chunk.links.prev_rank)) {
      local_gradients_[{edge, micro_batch}] = std::move(grads);
    } else {
      ctx_.comm->SendTensors(grads, chunk.links.prev_rank, Tag(micro_batch, edge, kGradientTag));
    }
  }

  // After chunk `chunk`'s last B: its parameters that no W still to run adds to.
  std::vector<torch::Tensor> WholeAfterB(int chunk) const {
    std::unordered_set<const c10::TensorImpl*> pending;
    for (const cutpoint::WeightGradients* w : pending_) {
      for (const torch::Tensor& p : w->Parameters()) pending.insert(p.unsafeGetTensorImpl());
    }
    std::vector<torch::Tensor> whole;
    for (const torch::Tensor& p : ctx_.stage->ChunkParameters(chunk)) {
      if (!pending.count(p.unsafeGetTensorImpl())) whole.push_back(p);
    }
    return whole;
  }

  void Forward(const Chunk& chunk, MicroBatchState& mb, const planner::Instruction& ins) {
    AutocastScope autocast(ctx_.precision, ctx_.device_type);
    cutpoint::SplitBackward split(split_);
    mb.outputs = ctx_.stage->Forward(mb.inputs, {ctx_.step, ctx_.first_micro_batch + ins.micro_batch},
                                     ins.chunk);
    if (chunk.last && metrics_ == nullptr) {
      mb.loss = ctx_.spec->loss(mb.outputs, mb.batch) * ctx_.loss_scale;
    }
  }

  // Evaluation, last stage: the micro-batch's loss and metric sums, in float64.
  void Accumulate(const MicroBatchState& mb) {
    AutocastScope autocast(ctx_.precision, ctx_.device_type);  // the loss as training computes it
    sums_[0] += ctx_.spec->loss(mb.outputs, mb.batch).item<double>();
    for (size_t i = 0; i < metrics_->size(); ++i) {
      sums_[i + 1] += (*metrics_)[i](mb.outputs, mb.batch).to(torch::kFloat64).sum().item<double>();
    }
  }

  void Backward(const Chunk& chunk, MicroBatchState& mb) {
    if (chunk.last) {
      // The scaled loss is for the backward only; the reported loss stays unscaled.
      (ctx_.grad_scale == 1 ? mb.loss : mb.loss * ctx_.grad_scale).backward();
    } else {
      std::vector<torch::Tensor> roots, grads;
      size_t g = 0;
      for (const auto& [name, t] : mb.outputs) {
        if (!t.is_floating_point()) continue;
        if (t.requires_grad()) {
          roots.push_back(t);
          grads.push_back(mb.output_grads[g]);
        }
        ++g;
      }
      if (!roots.empty()) torch::autograd::backward(roots, grads);
    }
    mb.outputs.clear();
    mb.output_grads.clear();
    mb.loss = torch::Tensor();
    if (chunk.first) mb = MicroBatchState();  // nothing to send back
  }

  void AddLoss(const torch::Tensor& loss) {
    const torch::Tensor value = loss.detach().to(torch::kFloat64);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + value : value;
  }

  const PipelineContext& ctx_;
  bool split_;
  int edges_;  // of the pipeline: for the tags
  std::vector<Chunk> chunks_;
  Local<Activations> local_activations_;
  Local<std::vector<torch::Tensor>> local_gradients_;
  std::vector<const cutpoint::WeightGradients*> pending_;  // B's whose W has not run
  const MicroBatchFn& micro_batch_;
  const std::vector<MetricFn>* metrics_;
  torch::Tensor loss_sum_;
  std::vector<double> sums_;  // evaluation: loss, then each metric
  size_t ahead_cursor_ = 0;     // PostAhead: the first instruction not looked at
  int activations_ahead_ = 0;  // posted and not yet received
};

}  // namespace

double RunPipelineStep(const PipelineContext& ctx, const std::vector<planner::Instruction>& schedule,
                       int num_micro_batches, const MicroBatchFn& micro_batch) {
  // By chunk: the index of its last B (or backward) and of its last W.
  std::vector<size_t> last_backward(ctx.chunks.size(), 0), last_weights(ctx.chunks.size(), schedule.size());
  bool split = false;
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op op = schedule[i].op;
    if (op == Op::kBackward || op == Op::kBackwardInput) last_backward[schedule[i].chunk] = i;
    if (op == Op::kBackwardWeight) last_weights[schedule[i].chunk] = i;
    split = split || op == Op::kBackwardInput;
  }
  Executor executor(ctx, num_micro_batches, micro_batch, /*metrics=*/nullptr, split);
  for (size_t i = 0; i < schedule.size(); ++i) {
    if (ctx.abandoned && ctx.abandoned()) {
      throw PeerError("the step in flight was given up before " +
                      planner::InstructionName(schedule[i]) + ": a peer failed");
    }
    executor.PostAhead(schedule, i);
    const auto start = StepTrace::Clock::now();
    const size_t c = schedule[i].chunk;
    executor.Execute(schedule[i], i == last_backward[c], i == last_weights[c]);
    const auto end = ctx.trace != nullptr ? ctx.trace->Now() : StepTrace::Clock::now();
    if (ctx.trace != nullptr) ctx.trace->Add(planner::InstructionName(schedule[i]), start, end);
    const Op op = schedule[i].op;
    if (ctx.wait_s != nullptr && (op == Op::kRecvActivations || op == Op::kRecvGradients ||
                                  op == Op::kSendActivations || op == Op::kSendGradients)) {
      *ctx.wait_s += std::chrono::duration<double>(end - start).count();
    }
  }
  return executor.loss_sum();
}

std::vector<double> RunEvalPipeline(const PipelineContext& ctx,
                                    const std::vector<planner::Instruction>& schedule,
                                    int num_micro_batches, const MicroBatchFn& micro_batch,
                                    const std::vector<MetricFn>& metrics) {
  torch::NoGradGuard no_grad;
  Executor executor(ctx, num_micro_batches, micro_batch, &metrics);
  for (size_t i = 0; i < schedule.size(); ++i) {
    executor.PostAhead(schedule, i);
    executor.Execute(schedule[i], /*final_backward=*/false);
  }
  return executor.sums();
}

}  // namespace mitra::worker
