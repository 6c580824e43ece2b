#include "worker/runtime.h"

#include "worker/pipeline.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <utility>

#include <torch/torch.h>

namespace mitra::worker {

Runtime::Runtime(const cutpoint::ModelSpec& spec, std::shared_ptr<const Dataset> dataset,
                 const Placement& placement, const RuntimeOptions& options)
    : spec_(spec), dataset_(std::move(dataset)), placement_(placement), options_(options) {}

Result<std::unique_ptr<Runtime>> Runtime::Create(const cutpoint::ModelSpec& spec,
                                                 std::shared_ptr<const Dataset> dataset,
                                                 const Placement& placement,
                                                 const RuntimeOptions& options) {
  if (Status s = spec.Validate(); !s.ok()) return s;
  auto kind = planner::ParseScheduleKind(options.schedule);
  if (!kind.ok()) return kind.status();
  auto backend = ParseBackend(options.backend);
  if (!backend.ok()) return backend.status();

  std::unique_ptr<Runtime> rt(new Runtime(spec, std::move(dataset), placement, options));
  RuntimeOptions& opts = rt->options_;
  if (placement.global_batch > 0) opts.global_batch = placement.global_batch;
  if (placement.chunk_size > 0) opts.chunk_size = placement.chunk_size;
  const int stages = placement.num_stages(), replicas = placement.num_replicas();
  if (opts.global_batch < replicas) {
    return Status::InvalidArgument("global batch " + std::to_string(opts.global_batch) +
                                   " is smaller than the " + std::to_string(replicas) +
                                   " data-parallel replicas: use a batch of at least " +
                                   std::to_string(replicas));
  }
  if (opts.chunk_size < 1) return Status::InvalidArgument("the micro-batch size must be >= 1");
  if (rt->dataset_->Size() < 1) return Status::InvalidArgument("the dataset is empty");

  auto partition = cutpoint::MakePartition(
      opts.partition, spec.num_segments(), stages,
      opts.partition == "params" ? cutpoint::CountSegmentParameters(spec) : std::vector<int64_t>{});
  if (!partition.ok()) return partition.status();
  rt->partition_ = *partition;

  rt->share_ = ShareOf(opts.global_batch, replicas, placement.replica());
  rt->num_micro_batches_ =
      static_cast<int>((rt->share_.count + opts.chunk_size - 1) / opts.chunk_size);
  rt->schedule_ = planner::BuildSchedule(*kind, stages, placement.stage(), rt->num_micro_batches_,
                                         opts.recompute);
  rt->sampler_.emplace(rt->dataset_->Size(), opts.global_batch, opts.seed);

  rt->stage_ = std::make_unique<Stage>(spec, rt->partition_, placement.stage(), opts.seed);
  auto tied = TiedWeights::Create(spec, rt->partition_, rt->placement_, *rt->stage_);
  if (!tied.ok()) return tied.status();
  rt->tied_ = std::make_unique<TiedWeights>(std::move(*tied));

  rt->comm_ = Comm::Connect(placement, *backend);  // throws PeerError
  if (rt->comm_->data_parallel()) {
    rt->reducer_ = std::make_unique<GradReducer>(rt->stage_->parameters(),
                                                 rt->comm_->data_parallel(), rt->comm_.get(),
                                                 opts.bucket_elements);
  }
  rt->tied_->SyncInitialValues(*rt->comm_);

  std::vector<torch::Tensor> params;
  for (const auto& p : rt->stage_->parameters()) params.push_back(p.tensor);
  rt->optimizer_ = std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(opts.lr.base)
                  .betas({opts.beta1, opts.beta2})
                  .eps(opts.eps)
                  .weight_decay(opts.weight_decay));
  return rt;
}

cutpoint::Activations Runtime::MicroBatch(int64_t step, int micro_batch) {
  const int64_t begin = static_cast<int64_t>(micro_batch) * options_.chunk_size;
  const int64_t count = std::min<int64_t>(options_.chunk_size, share_.count - begin);
  return Collate(*dataset_, sampler_->Indices(step, share_.offset + begin, count));
}

void Runtime::TraceSamples(int64_t step) {
  // One file per generation and rank: a reader takes each step from the newest generation that
  // traced it, since a step begun before a failure is trained again after the recovery.
  std::ofstream out(options_.sample_trace + ".gen-" + std::to_string(placement_.generation) +
                        ".rank-" + std::to_string(placement_.rank),
                    std::ios::app);
  out << step << " " << placement_.replica();
  for (int64_t index : sampler_->Indices(step, share_.offset, share_.count)) out << " " << index;
  out << "\n";
}

StepResult Runtime::Step(int64_t step, const std::function<bool()>& stop_requested) {
  if (!options_.sample_trace.empty() && placement_.stage() == 0) TraceSamples(step);
  for (const auto& p : stage_->parameters()) {
    if (p.tensor.grad().defined()) p.tensor.mutable_grad().zero_();
  }
  const int s = placement_.stage(), d = placement_.replica();
  PipelineContext ctx;
  ctx.spec = &spec_;
  ctx.stage = stage_.get();
  ctx.comm = comm_.get();
  ctx.reducer = reducer_.get();
  ctx.prev_rank = s > 0 ? placement_.stage_map.RankOf(s - 1, d) : -1;
  ctx.next_rank = s + 1 < placement_.num_stages() ? placement_.stage_map.RankOf(s + 1, d) : -1;
  ctx.loss_scale = 1.0 / static_cast<double>(options_.global_batch);
  const double loss = RunPipelineStep(ctx, schedule_, num_micro_batches_,
                                      [&](int mb) { return MicroBatch(step, mb); });
  comm_->WaitSends();
  if (reducer_) reducer_->Finish();
  tied_->SumGradients(*comm_);

  // One all-reduce per step carries the squared gradient norm (replica 0 of every stage, tied
  // copies once), the loss (last stages) and the stop wishes (everyone).
  double squared_norm = 0;
  if (d == 0) {
    for (const auto& p : stage_->parameters()) {
      if (!p.tensor.grad().defined() || tied_->IsSecondaryCopy(p.name)) continue;
      const double n = p.tensor.grad().norm().item<double>();
      squared_norm += n * n;
    }
  }
  auto totals =
      torch::tensor({squared_norm, loss, stop_requested() ? 1.0 : 0.0}, torch::kFloat64);
  std::vector<torch::Tensor> buffers{totals};
  comm_->Wait(comm_->global().allreduce(buffers), "the step's all-reduce of loss and gradient norm");

  StepResult result;
  result.grad_norm = std::sqrt(totals[0].item<double>());
  result.loss = totals[1].item<double>();
  result.stop = totals[2].item<double>() > 0;
  result.lr = options_.lr.At(step);
  if (options_.clip_norm > 0) {
    const double coef = options_.clip_norm / (result.grad_norm + 1e-6);
    if (coef < 1) {
      torch::NoGradGuard no_grad;
      for (const auto& p : stage_->parameters()) {
        if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
      }
    }
  }
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(result.lr);
  }
  if (before_update_) std::exchange(before_update_, nullptr)();
  optimizer_->step();
  return result;
}

}  // namespace mitra::worker
