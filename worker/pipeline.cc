#include "worker/pipeline.h"

#include <chrono>

#include <torch/torch.h>

#include "cutpoint/linear.h"

namespace mitra::worker {
namespace {

using cutpoint::Activations;
using planner::Op;

enum Tag { kActivationTag = 0, kGradientTag = 1 };
int TagOf(int micro_batch, Tag kind) { return micro_batch * 4 + kind; }

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
  // `split`: the schedule runs each backward as a B and a W (cutpoint/linear.h).
  Executor(const PipelineContext& ctx, int num_micro_batches, const MicroBatchFn& micro_batch,
           const std::vector<MetricFn>* metrics = nullptr, bool split = false)
      : ctx_(ctx), first_(ctx.prev_rank < 0), last_(ctx.next_rank < 0), split_(split),
        mbs_(num_micro_batches), weights_(num_micro_batches), micro_batch_(micro_batch),
        metrics_(metrics), sums_(metrics ? metrics->size() + 1 : 0, 0.0) {}

  // `final_backward`: the step's last B (or backward); `final_weights`: its last W.
  void Execute(const planner::Instruction& ins, bool final_backward, bool final_weights = false) {
    MicroBatchState& mb = mbs_[ins.micro_batch];
    switch (ins.op) {
      case Op::kRecvActivations:
        mb.inputs = ctx_.comm->RecvActivations(ctx_.prev_rank,
                                               TagOf(ins.micro_batch, kActivationTag));
        if (metrics_ == nullptr) {
          for (auto& [name, t] : mb.inputs) {
            if (t.is_floating_point()) t.requires_grad_(true);
          }
        }
        break;
      case Op::kForward:
      case Op::kForwardDiscard: {
        if (first_ || last_) mb.batch = micro_batch_(ins.micro_batch);
        if (first_) mb.inputs = mb.batch;
        const bool discard = ins.op == Op::kForwardDiscard;
        torch::AutoGradMode grad_mode(!discard);
        if (discard && metrics_ == nullptr && !ctx_.stage->buffers().empty()) {
          mb.buffers_seen = ctx_.stage->CopyBuffers();
        }
        Forward(mb, ins.micro_batch);
        if (metrics_ == nullptr) {
          if (last_) AddLoss(mb.loss);
        } else if (last_) {
          Accumulate(mb);
          mb = MicroBatchState();
        }
        break;
      }
      case Op::kRecompute:
        if (!mb.buffers_seen.empty()) {
          const std::vector<torch::Tensor> now = ctx_.stage->CopyBuffers();
          ctx_.stage->RestoreBuffers(mb.buffers_seen);
          Forward(mb, ins.micro_batch);
          ctx_.stage->RestoreBuffers(now);
          mb.buffers_seen.clear();
        } else {
          Forward(mb, ins.micro_batch);
        }
        break;
      case Op::kSendActivations:
        ctx_.comm->SendActivations(mb.outputs, ctx_.next_rank, TagOf(ins.micro_batch, kActivationTag));
        if (metrics_ != nullptr) mb = MicroBatchState();
        break;
      case Op::kRecvGradients: {
        mb.output_grads.clear();
        for (const auto& [name, t] : mb.outputs) {
          if (t.is_floating_point()) mb.output_grads.push_back(torch::empty(t.sizes(), t.options()));
        }
        ctx_.comm->RecvTensors(mb.output_grads, ctx_.next_rank, TagOf(ins.micro_batch, kGradientTag),
                               "gradients of micro-batch " + std::to_string(ins.micro_batch));
        break;
      }
      case Op::kBackward:
        if (final_backward && ctx_.reducer) ctx_.reducer->Arm();
        Backward(mb);
        break;
      case Op::kBackwardInput: {
        cutpoint::WeightGradients& weights = weights_[ins.micro_batch];
        {
          cutpoint::DeferWeightGradients defer(&weights);
          Backward(mb);
        }
        // Whole now: every gradient but those the W's still add to (GradReducer's comment).
        if (final_backward && ctx_.reducer) ctx_.reducer->FillAllBut(weights.Parameters());
        break;
      }
      case Op::kBackwardWeight:
        if (final_weights && ctx_.reducer) {
          weights_[ins.micro_batch].Run(
              [this](const std::vector<torch::Tensor>& whole) { ctx_.reducer->Fill(whole); });
        } else {
          weights_[ins.micro_batch].Run();
        }
        break;
      case Op::kSendGradients: {
        std::vector<torch::Tensor> grads;
        for (const auto& [name, t] : mb.inputs) {
          if (!t.is_floating_point()) continue;
          grads.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
        }
        ctx_.comm->SendTensors(grads, ctx_.prev_rank, TagOf(ins.micro_batch, kGradientTag));
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
  void Forward(MicroBatchState& mb, int micro_batch) {
    AutocastScope autocast(ctx_.precision, ctx_.device_type);
    cutpoint::SplitBackward split(split_);
    mb.outputs = ctx_.stage->Forward(mb.inputs, {ctx_.step, ctx_.first_micro_batch + micro_batch});
    if (last_ && metrics_ == nullptr) {
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

  void Backward(MicroBatchState& mb) {
    if (last_) {
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
    if (first_) mb = MicroBatchState();  // nothing to send back
  }

  const PipelineContext& ctx_;
  bool first_, last_, split_;
  std::vector<MicroBatchState> mbs_;
  std::vector<cutpoint::WeightGradients> weights_;  // by micro-batch: what its B left for its W
  const MicroBatchFn& micro_batch_;
  const std::vector<MetricFn>* metrics_;
  void AddLoss(const torch::Tensor& loss) {
    const torch::Tensor value = loss.detach().to(torch::kFloat64);
    loss_sum_ = loss_sum_.defined() ? loss_sum_ + value : value;
  }
  torch::Tensor loss_sum_;
  std::vector<double> sums_;  // evaluation: loss, then each metric
};

}  // namespace

double RunPipelineStep(const PipelineContext& ctx, const std::vector<planner::Instruction>& schedule,
                       int num_micro_batches, const MicroBatchFn& micro_batch) {
  size_t last_backward = 0, last_weights = schedule.size();
  bool split = false;
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Op op = schedule[i].op;
    if (op == Op::kBackward || op == Op::kBackwardInput) last_backward = i;
    if (op == Op::kBackwardWeight) last_weights = i;
    split = split || op == Op::kBackwardInput;
  }
  Executor executor(ctx, num_micro_batches, micro_batch, /*metrics=*/nullptr, split);
  for (size_t i = 0; i < schedule.size(); ++i) {
    if (ctx.abandoned && ctx.abandoned()) {
      throw PeerError("the step in flight was given up before " +
                      std::string(planner::OpName(schedule[i].op)) +
                      std::to_string(schedule[i].micro_batch) + ": a peer failed");
    }
    const auto start = StepTrace::Clock::now();
    executor.Execute(schedule[i], i == last_backward, i == last_weights);
    const auto end = ctx.trace != nullptr ? ctx.trace->Now() : StepTrace::Clock::now();
    if (ctx.trace != nullptr) {
      ctx.trace->Add(std::string(planner::OpName(schedule[i].op)) +
                         std::to_string(schedule[i].micro_batch),
                     start, end);
    }
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
  for (const auto& ins : schedule) executor.Execute(ins, /*final_backward=*/false);
  return executor.sums();
}

}  // namespace mitra::worker
