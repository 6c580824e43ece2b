#include "worker/pipeline.h"

#include <torch/torch.h>

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
};

class Executor {
 public:
  Executor(const PipelineContext& ctx, int num_micro_batches, const MicroBatchFn& micro_batch)
      : ctx_(ctx), first_(ctx.prev_rank < 0), last_(ctx.next_rank < 0),
        mbs_(num_micro_batches), micro_batch_(micro_batch) {}

  void Execute(const planner::Instruction& ins, bool final_backward) {
    MicroBatchState& mb = mbs_[ins.micro_batch];
    switch (ins.op) {
      case Op::kRecvActivations:
        mb.inputs = ctx_.comm->RecvActivations(ctx_.prev_rank,
                                               TagOf(ins.micro_batch, kActivationTag));
        for (auto& [name, t] : mb.inputs) {
          if (t.is_floating_point()) t.requires_grad_(true);
        }
        break;
      case Op::kForward:
      case Op::kForwardDiscard: {
        if (first_ || last_) mb.batch = micro_batch_(ins.micro_batch);
        if (first_) mb.inputs = mb.batch;
        const bool discard = ins.op == Op::kForwardDiscard;
        torch::AutoGradMode grad_mode(!discard);
        Forward(mb);
        loss_sum_ += last_ ? mb.loss.item<double>() : 0.0;
        break;
      }
      case Op::kRecompute:
        Forward(mb);
        break;
      case Op::kSendActivations:
        ctx_.comm->SendActivations(mb.outputs, ctx_.next_rank, TagOf(ins.micro_batch, kActivationTag));
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

  double loss_sum() const { return loss_sum_; }

 private:
  void Forward(MicroBatchState& mb) {
    mb.outputs = ctx_.stage->Forward(mb.inputs);
    if (last_) mb.loss = ctx_.spec->loss(mb.outputs, mb.batch) * ctx_.loss_scale;
  }

  void Backward(MicroBatchState& mb) {
    if (last_) {
      mb.loss.backward();
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
  bool first_, last_;
  std::vector<MicroBatchState> mbs_;
  const MicroBatchFn& micro_batch_;
  double loss_sum_ = 0;
};

}  // namespace

double RunPipelineStep(const PipelineContext& ctx, const std::vector<planner::Instruction>& schedule,
                       int num_micro_batches, const MicroBatchFn& micro_batch) {
  Executor executor(ctx, num_micro_batches, micro_batch);
  size_t last_backward = 0;
  for (size_t i = 0; i < schedule.size(); ++i) {
    if (schedule[i].op == Op::kBackward) last_backward = i;
  }
  for (size_t i = 0; i < schedule.size(); ++i) executor.Execute(schedule[i], i == last_backward);
  return executor.loss_sum();
}

}  // namespace mitra::worker
