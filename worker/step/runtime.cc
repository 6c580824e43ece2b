#include "mitra/worker/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/strings.h"
#include "mitra/planner/schedule.h"
#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"
#include "worker/step/arriving_state.h"
#include "worker/step/buffer_sync.h"
#include "worker/step/grad_reducer.h"
#include "worker/step/held_state.h"
#include "worker/step/kernel_trace.h"
#include "worker/step/pipeline.h"
#include "worker/step/pipeline_partitions.h"
#include "worker/step/precision.h"
#include "worker/step/tied_weights.h"

namespace mitra::worker {

Runtime::Runtime(const cutpoint::ModelSpec& spec, std::shared_ptr<const Dataset> dataset,
                 const Placement& placement, const RuntimeOptions& options)
    : spec_(spec), dataset_(std::move(dataset)), placement_(placement), options_(options) {}

Runtime::~Runtime() {
  // Its thread waits on the process groups: it ends before they go.
  if (in_flight_) in_flight_->Abort();
}

namespace {

constexpr int64_t kTracedStep = 2;  // the third step a process trains: after warm-up

// Where the traced step's kernels go on a GPU: beside its step trace, "trace.rank-0.json" ->
// "trace.rank-0.kernels.json".
std::string KernelTracePath(const std::string& step_trace) {
  const std::string_view suffix = ".json";
  const bool json = EndsWith(step_trace, suffix) && step_trace.size() > suffix.size();
  return (json ? step_trace.substr(0, step_trace.size() - suffix.size()) : step_trace) +
         ".kernels.json";
}

// The traced step's kernel trace, or none (said on stderr) where LibTorch's profiler is missing:
// the step trace is written either way.
std::unique_ptr<KernelTrace> StartKernelTrace() {
  Result<std::unique_ptr<KernelTrace>> started = KernelTrace::Start();
  if (!started.ok()) {
    std::fprintf(stderr, "no kernel trace of the traced step: %s\n",
                 started.status().message().c_str());
    return nullptr;
  }
  return std::move(started).value();
}

// The parameters of `stage` (indices into its parameters()) in `segments` (ascending).
std::vector<int> ParametersOf(const Stage& stage, const std::vector<int>& segments) {
  std::vector<int> out;
  for (size_t i = 0; i < stage.parameters().size(); ++i) {
    if (std::binary_search(segments.begin(), segments.end(), stage.SegmentOfParameter(i))) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

// The program's options with what the manager set in the placement instead: its plan (schedule,
// recomputation, partition), MITRA_PRECISION and MITRA_DEVICE, the batch and the micro-batch.
// The placement carries them as the environment's text; a bad one is refused naming its
// variable.
Result<RuntimeOptions> WithPlacement(RuntimeOptions options, const Placement& placement) {
  auto bad = [](const char* variable, const Status& s) {
    return Status::InvalidArgument(std::string(variable) + ": " + s.message());
  };
  if (!placement.schedule.empty()) {
    auto kind = planner::ParseScheduleKind(placement.schedule);
    if (!kind.ok()) return bad("MITRA_SCHEDULE", kind.status());
    options.schedule = *kind;
  }
  options.recompute = placement.recompute.value_or(options.recompute);
  if (placement.zero) options.zero = *placement.zero ? 1 : 0;
  if (!placement.partition.empty()) {
    auto method = cutpoint::ParsePartitionMethod(placement.partition);
    if (!method.ok()) return bad("MITRA_PARTITION", method.status());
    options.partition = *method;
  }
  if (!placement.precision.empty()) {
    auto precision = ParsePrecision(placement.precision);
    if (!precision.ok()) return bad("MITRA_PRECISION", precision.status());
    options.precision = *precision;
  }
  if (!placement.device.empty()) {
    auto device = ParseDeviceKind(placement.device);
    if (!device.ok()) return bad("MITRA_DEVICE", device.status());
    options.device = *device;
  }
  options.global_batch = placement.global_batch.value_or(options.global_batch);
  options.chunk_size = placement.chunk_size.value_or(options.chunk_size);
  return options;
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::Create(const cutpoint::ModelSpec& spec,
                                                 std::shared_ptr<const Dataset> dataset,
                                                 const Placement& placement,
                                                 const RuntimeOptions& program_options,
                                                 HeldState* held) {
  if (Status s = spec.Validate(); !s.ok()) return s;
  Result<RuntimeOptions> options = WithPlacement(program_options, placement);
  if (!options.ok()) return options.status();
  auto device = LocalDevice(options->device, placement.local_rank, options->share_gpus);
  if (!device.ok()) return device.status();
  if (Status s = CheckPrecisionOn(options->precision, device->type()); !s.ok()) return s;
  if (options->backend == Backend::kNccl && !device->is_cuda()) {
    return Status::InvalidArgument("backend 'nccl' moves CUDA tensors: use --device cuda with it, "
                                   "or --backend gloo for stages on the CPU");
  }
  if (options->backend == Backend::kNccl && options->share_gpus) {
    const auto gpus = static_cast<int64_t>(torch::cuda::device_count());
    if (Status s = CheckNcclGpuSharing(placement.local_rank, gpus); !s.ok()) return s;
  }
  std::unique_ptr<Runtime> rt(new Runtime(spec, std::move(dataset), placement, *options));
  rt->device_ = *device;
  if (Status s = rt->SetUpLossScaling(); !s.ok()) return s;
  if (Status s = rt->PlanSteps(); !s.ok()) return s;
  if (Status s = rt->BuildStage(held); !s.ok()) return s;
  if (Status s = rt->SetUpOptimizer(held); !s.ok()) return s;
  rt->Connect();  // throws PeerError
  return rt;
}

Status Runtime::SetUpLossScaling() {
  RuntimeOptions& opts = options_;
  if (opts.precision == Precision::kFp16) opts.loss_scaler.enabled = true;
  if (!opts.loss_scaler.enabled) return Status::Ok();
  if (!(opts.loss_scaler.initial_scale >= 1) || opts.loss_scaler.growth_interval < 1) {
    return Status::InvalidArgument("the loss scale must start at 1 or more and grow after 1 "
                                   "or more good steps");
  }
  scaler_ = std::make_unique<LossScaler>(opts.loss_scaler);
  return Status::Ok();
}

Status Runtime::PlanSteps() {
  const RuntimeOptions& opts = options_;
  const int stages = placement_.num_stages(), replicas = placement_.num_replicas();
  if (opts.global_batch < 1) return Status::InvalidArgument("the global batch must be >= 1");
  if (opts.chunk_size < 1) return Status::InvalidArgument("the micro-batch size must be >= 1");
  const int64_t micro_batches = planner::NumMicroBatches(opts.global_batch, opts.chunk_size);
  if (micro_batches < replicas) {
    return Status::InvalidArgument(
        "a batch of " + std::to_string(opts.global_batch) + " in micro-batches of " +
        std::to_string(opts.chunk_size) + " makes " + std::to_string(micro_batches) +
        " micro-batches, fewer than the " + std::to_string(replicas) +
        " data-parallel replicas: use a smaller micro-batch or a larger batch");
  }
  if (dataset_->Size() < 1) return Status::InvalidArgument("the dataset is empty");

  const Result<cutpoint::PartitionMethod> own =
      cutpoint::PipelineMethod(opts.partition, placement_.replica(), replicas);
  if (!own.ok()) return own.status();
  if (Status s = PlanChunks(*own); !s.ok()) return s;
  if (Status s = planner::CheckShares(placement_.shares, micro_batches, replicas); !s.ok()) {
    return Status::InvalidArgument("MITRA_SHARES: " + s.message());
  }
  share_ = planner::ShareOf(opts.global_batch, opts.chunk_size, placement_.shares, replicas,
                            placement_.replica());
  if (opts.schedule == planner::ScheduleKind::kInterleaved &&
      !planner::InterleavedFits(stages, static_cast<int>(share_.micro_batches))) {
    return Status::InvalidArgument(
        "schedule interleaved runs micro-batches in groups of the " + std::to_string(stages) +
        " stages, and replica " + std::to_string(placement_.replica()) + " has " +
        std::to_string(share_.micro_batches) + " micro-batches: give each replica a multiple of " +
        std::to_string(stages) + " (--batch-size, --chunk-size), or use --schedule zb-v or 1f1b");
  }
  // Under interleaved and zb-v the partition cuts the model into the chunks of every stage.
  if (Status s = PartitionPipelines(); !s.ok()) return s;

  schedule_ = planner::BuildSchedule(opts.schedule, layout_, placement_.stage(),
                                     static_cast<int>(share_.micro_batches), opts.recompute);
  const SamplerFactory make_sampler =
      opts.custom_sampler ? opts.custom_sampler : MakeSamplerFactory(opts.sampler);
  sampler_ = make_sampler(dataset_->Size(), opts.seed);
  if (!sampler_) return Status::InvalidArgument("the program's sampler factory returned none");
  return Status::Ok();
}

Status Runtime::PartitionPipelines() {
  const int ranges = layout_.num_virtual_stages(), replicas = placement_.num_replicas();
  std::vector<cutpoint::Partition> by_replica;
  for (int d = 0; d < replicas; ++d) {
    const Result<cutpoint::PartitionMethod> method =
        cutpoint::PipelineMethod(options_.partition, d, replicas);
    Result<cutpoint::Partition> partition =
        method.ok() ? cutpoint::PartitionModel(spec_, *method, ranges) : method.status();
    if (!partition.ok()) {
      if (options_.partition.kind != cutpoint::PartitionMethod::Kind::kPerPipeline) {
        return partition.status();
      }
      return Status::InvalidArgument("replica " + std::to_string(d) + "'s partition: " +
                                     partition.status().message());
    }
    by_replica.push_back(*partition);
  }
  partition_ = by_replica.at(placement_.replica());
  pipelines_ = std::make_unique<PipelinePartitions>(std::move(by_replica), layout_,
                                                    placement_.stage_map);
  if (pipelines_->Alike()) return Status::Ok();
  if (options_.zero == 1) {
    return Status::InvalidArgument(
        "partition '" + pipelines_->ToString() + "' cuts each pipeline differently, and ZeRO-1 "
        "shards a stage's optimizer state over the replicas of that stage: use --zero 0 with it, "
        "or one partition for every pipeline");
  }
  return Status::Ok();
}

Status Runtime::PlanChunks(const cutpoint::PartitionMethod& own) {
  const RuntimeOptions& opts = options_;
  const int stages = placement_.num_stages();
  const bool explicit_counts = own.kind == cutpoint::PartitionMethod::Kind::kExplicit;
  const int counts = explicit_counts ? static_cast<int>(own.counts.size()) : 0;
  const std::string name = planner::ScheduleName(opts.schedule);
  if (opts.schedule == planner::ScheduleKind::kInterleaved && explicit_counts &&
      !planner::InterleavedRanges(stages, counts)) {
    return Status::InvalidArgument(
        "schedule interleaved runs v >= 2 chunks on each of the " + std::to_string(stages) +
        " stages, one count of --partition each, and the partition gives " +
        std::to_string(counts) + ": give a multiple of " + std::to_string(stages) + " counts, " +
        std::to_string(2 * stages) + " or more");
  }
  layout_ = planner::LayoutOf(opts.schedule, stages, counts);
  const int ranges = layout_.num_virtual_stages();
  if (explicit_counts && layout_.chunks > 1 && counts != ranges) {
    return Status::InvalidArgument(
        "schedule " + name + " runs " + std::to_string(layout_.chunks) + " chunk" +
        (layout_.chunks > 1 ? "s" : "") + " on each of the " + std::to_string(stages) +
        " stages, and the partition gives " + std::to_string(counts) + " counts: give " +
        std::to_string(ranges) + ", one per chunk");
  }
  if (spec_.num_segments() < ranges) {
    return Status::InvalidArgument(
        "schedule " + name + " runs " + std::to_string(layout_.chunks) + " chunks on each of the " +
        std::to_string(stages) + " stages, " + std::to_string(ranges) +
        " ranges of segments, and the model has " + std::to_string(spec_.num_segments()) +
        " segments: use fewer stages or chunks, or another schedule");
  }
  return Status::Ok();
}

Status Runtime::BuildStage(HeldState* held) {
  stage_ = std::make_unique<Stage>(spec_, partition_, layout_, placement_.stage(), options_.seed,
                                   held, placement_.resume_step);
  completed_steps_ = placement_.resume_step;
  restored_ = placement_.resume_step == 0;  // the initial values are step 0's state
  // Built on the CPU (the same initial values in every shape and on every device), then moved
  // before the optimizer makes its state, so that the state is born on the device too. Module::to
  // keeps the parameter tensors' identities: the stage's handles stay valid.
  if (!device_.is_cpu()) {
    for (const auto& segment : stage_->segments()) segment->to(device_);
  }
  for (size_t k = 0; k < stage_->segment_ids().size(); ++k) {
    const int i = stage_->segment_ids()[k];
    if (Status s = cutpoint::CheckMicroBatchIndependence(spec_, i, *stage_->segments()[k]); !s.ok()) {
      return s;
    }
  }
  auto tied = TiedWeights::Create(spec_, partition_, layout_, placement_, *stage_);
  if (!tied.ok()) return tied.status();
  tied_ = std::make_unique<TiedWeights>(std::move(*tied));
  return Status::Ok();
}

Status Runtime::SetUpOptimizer(HeldState* held) {
  const int zero = options_.zero;
  if (zero != 0 && zero != 1) {
    return Status::InvalidArgument("--zero " + std::to_string(zero) +
                                   ": mitra shards optimizer state only (ZeRO stage 1): use 0 or 1");
  }
  sharded_ = zero == 1 && placement_.num_replicas() > 1;
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i < stage_->parameters().size(); ++i) {
    if (!KeepsOptimizerStateOf(stage_->SegmentOfParameter(i))) continue;
    params.push_back(stage_->parameters()[i].tensor);
  }
  auto optimizer = MakeOptimizer(options_.optimizer, params);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);
  return held != nullptr ? AdoptOptimizerState(*held) : Status::Ok();
}

void Runtime::Connect() {
  comm_ = Comm::Connect(placement_, options_.backend, device_);
  if (pipelines_->Alike()) {
    if (comm_->data_parallel()) {
      reducer_ = std::make_unique<GradReducer>(stage_->parameters(), comm_->data_parallel(),
                                               comm_.get(), options_.bucket_elements);
    }
    if (auto sync = BufferSync::Create(*stage_, comm_.get())) {
      buffer_syncs_.push_back(std::move(sync));
    }
  } else {
    // Each pipeline cut its own way: the groups of the ranks that hold the same segments, joined
    // (and later used) in the order every rank shares.
    std::vector<GradReducer::Reduction> reductions;
    for (const ReductionGroup& group : pipelines_->GroupsOf(placement_.rank)) {
      c10d::ProcessGroup* joined = comm_->ReductionGroup(group.ranks);
      reductions.push_back({joined, ParametersOf(*stage_, group.segments)});
      if (auto sync = BufferSync::Create(*stage_, comm_.get(), joined, group.segments)) {
        buffer_syncs_.push_back(std::move(sync));
      }
    }
    reducer_ = std::make_unique<GradReducer>(stage_->parameters(), std::move(reductions),
                                             comm_.get(), options_.bucket_elements);
  }
  // A fresh start makes the copies of a tied weight equal. A resume must not: every copy gets
  // its own state of the resume step (kept, from a peer, from the checkpoint), and the first
  // copy may be a new process's initial values until then.
  if (placement_.resume_step == 0) tied_->SyncInitialValues(*comm_);
}

std::vector<int64_t> Runtime::Indices(int64_t step, int64_t offset, int64_t count) {
  std::vector<int64_t> out;
  out.reserve(count);
  for (int64_t j = 0; j < count; ++j) {
    out.push_back(sampler_->IndexAt(step * options_.global_batch + offset + j));
  }
  return out;
}

void Runtime::PrefetchFrom(int64_t step) {
  const int ahead = dataset_->PrefetchSteps();
  if (ahead <= 0) return;
  // A step before the last told: a resume or a morph went back (or the share changed);
  // tell again from here.
  if (step <= prefetched_through_ - ahead - 1 || step > prefetched_through_) {
    prefetched_through_ = step - 1;
  }
  for (int64_t s = prefetched_through_ + 1; s <= step + ahead; ++s) {
    dataset_->Prefetch(Indices(s, share_.offset, share_.samples));
  }
  prefetched_through_ = step + ahead;
}

cutpoint::Activations Runtime::MicroBatch(int64_t step, int micro_batch) {
  if (micro_batch == 0) PrefetchFrom(step);
  const planner::SampleRange range = planner::MicroBatchSamples(
      options_.global_batch, options_.chunk_size, share_.first_micro_batch + micro_batch);
  cutpoint::Activations batch = Collate(*dataset_, Indices(step, range.begin, range.end - range.begin));
  ToDevice(batch);
  return batch;
}

void Runtime::ToDevice(cutpoint::Activations& batch) const {
  if (device_.is_cpu()) return;
  for (auto& [name, t] : batch) t = t.to(device_, /*non_blocking=*/true);
}

void Runtime::TraceSamples(int64_t step) {
  // One file per generation and rank: a reader takes each step from the newest generation that
  // traced it, since a step begun before a failure is trained again after the recovery.
  std::ofstream out(options_.sample_trace + ".gen-" + std::to_string(placement_.generation) +
                        ".rank-" + std::to_string(placement_.rank),
                    std::ios::app);
  out << step << " " << placement_.replica();
  for (int64_t index : Indices(step, share_.offset, share_.samples)) out << " " << index;
  out << "\n";
}

PipelineContext Runtime::Context(int64_t step, int64_t first_micro_batch) {
  const int s = placement_.stage(), d = placement_.replica();
  PipelineContext ctx;
  ctx.spec = &spec_;
  ctx.stage = stage_.get();
  ctx.comm = comm_.get();
  ctx.rank = placement_.rank;
  ctx.num_virtual_stages = layout_.num_virtual_stages();
  // The rank of virtual stage j of this replica's pipeline; -1 past either end.
  const auto rank_of = [&](int j) {
    if (j < 0 || j >= layout_.num_virtual_stages()) return -1;
    return placement_.stage_map.RankOf(layout_.StageOf(j), d);
  };
  ctx.chunks.clear();
  for (int c = 0; c < layout_.chunks; ++c) {
    const int j = layout_.VirtualStage(s, c);
    ctx.chunks.push_back({j, rank_of(j - 1), rank_of(j + 1)});
  }
  ctx.step = step;
  ctx.first_micro_batch = first_micro_batch;
  ctx.precision = options_.precision;
  ctx.device_type = device_.type();
  return ctx;
}

Status Runtime::AdoptOptimizerState(HeldState& held) {
  // Another optimizer's state is of no use: the adopted parameters start with none, as after
  // a restore from a checkpoint written with another optimizer.
  if (held.optimizer != optimizer_->Name()) return Status::Ok();
  const std::vector<NamedTensor>& params = stage_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const NamedTensor& p = params[i];
    const int segment = stage_->SegmentOfParameter(i);
    if (!stage_->Adopted(segment) || !KeepsOptimizerStateOf(segment)) continue;
    auto state = held.optimizer_state.find(p.name);
    if (state == held.optimizer_state.end()) continue;
    if (Status s = optimizer_->SetState(p.tensor, state->second); !s.ok()) {
      return Status::Internal("the optimizer state kept for " + p.name + ": " + s.message());
    }
    held.optimizer_state.erase(state);
  }
  return Status::Ok();
}

int Runtime::ReplicaOwning(int segment) const {
  // Pipelines cut alike: the stage's segments in turn. Cut differently, the segments of a stage
  // differ by replica, and the model's segments go in turn.
  const int replicas = placement_.num_replicas();
  if (!pipelines_->Alike()) return planner::ReplicaOwningSegment(segment, 0, replicas);
  return planner::ReplicaOwningSegment(stage_->IndexOf(segment), 0, replicas);
}

bool Runtime::KeepsOptimizerStateOf(int segment) const {
  if (!sharded_) return true;
  return ReplicaOwning(segment) == placement_.replica();
}

int64_t Runtime::OptimizerStateBytes() const {
  int64_t bytes = 0;
  for (const NamedTensor& p : stage_->parameters()) {
    for (const auto& [name, t] : optimizer_->State(p.tensor)) {
      bytes += static_cast<int64_t>(t.numel() * t.element_size());
    }
  }
  return bytes;
}

void Runtime::ShareUpdatedParameters() {
  torch::NoGradGuard no_grad;
  const std::vector<NamedTensor>& params = stage_->parameters();
  for (int owner = 0; owner < placement_.num_replicas(); ++owner) {
    std::vector<torch::Tensor> share, flat_views;
    for (size_t i = 0; i < params.size(); ++i) {
      if (ReplicaOwning(stage_->SegmentOfParameter(i)) != owner) continue;
      share.push_back(params[i].tensor.detach());
      flat_views.push_back(share.back().reshape({-1}));
    }
    if (share.empty()) continue;
    std::vector<torch::Tensor> flat{torch::cat(flat_views)};  // the owner's values; others': overwritten
    c10d::BroadcastOptions options;
    options.rootRank = owner;
    comm_->Wait(comm_->data_parallel()->broadcast(flat, options),
                "sending replica " + std::to_string(owner) + "'s updated parameters (ZeRO-1)");
    if (owner == placement_.replica()) continue;
    int64_t offset = 0;
    for (torch::Tensor& t : share) {
      t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void Runtime::ExpectStateFromPeers(std::unique_ptr<ArrivingState> in_flight, double exchange_s) {
  in_flight_ = std::move(in_flight);
  resume_times_ = {exchange_s, 0, 0};
}

void Runtime::AwaitStateFromPeers() {
  if (!in_flight_) return;
  if (Status s = in_flight_->Finish(*this); !s.ok()) {
    throw std::runtime_error("the state from peers: " + s.message());
  }
  resume_times_.arrival_s = in_flight_->arrival_s();
  resume_times_.wait_s = in_flight_->wait_s();
  in_flight_.reset();
}

// Every rank's resume times in a sum: three slots per rank, this rank's filled, the others 0.
torch::Tensor Runtime::ResumeTimeSlots() const {
  torch::Tensor slots = torch::zeros({3 * static_cast<int64_t>(placement_.world_size())},
                                     torch::kFloat64);
  const int64_t mine = 3 * static_cast<int64_t>(placement_.rank);
  slots[mine] = resume_times_.exchange_s;
  slots[mine + 1] = resume_times_.arrival_s;
  slots[mine + 2] = resume_times_.wait_s;
  return slots;
}

void Runtime::TakeSlowestResumeTimes(const torch::Tensor& summed_slots) {
  const torch::Tensor slowest = std::get<0>(summed_slots.view({-1, 3}).max(0));
  resume_times_ = {slowest[0].item<double>(), slowest[1].item<double>(),
                   slowest[2].item<double>()};
}

HeldState Runtime::Release() {
  HeldState held;
  if (!HoldsWholeState()) return held;
  // State still on its way from peers makes what it restored incomplete: only the segments it
  // kept are whole.
  const bool restored = restored_ && !in_flight_;
  held.step = completed_steps_;
  held.first_segment = stage_->segment_ids().front();
  held.end_segment = stage_->segment_ids().back() + 1;
  held.optimizer = optimizer_->Name();
  const std::vector<NamedTensor>& params = stage_->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!restored && !stage_->Adopted(stage_->SegmentOfParameter(i))) continue;
    for (auto& [name, tensor] : optimizer_->State(params[i].tensor)) {
      held.optimizer_state[params[i].name][name] = tensor;
    }
  }
  for (int i = held.first_segment; i < held.end_segment; ++i) {
    const bool valid = restored || stage_->Adopted(i);
    held.segments.push_back(valid ? stage_->segments()[i - held.first_segment] : nullptr);
  }
  if (scaler_) {
    held.trainer.loss_scale = scaler_->scale();
    held.trainer.loss_scale_good_steps = scaler_->good_steps();
  }
  held.trainer.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  return held;
}

std::vector<torch::Tensor> Runtime::Gradients(bool tied_copies) const {
  std::vector<torch::Tensor> grads;
  for (const auto& p : stage_->parameters()) {
    if (!p.tensor.grad().defined()) continue;
    if (!tied_copies && tied_->IsSecondaryCopy(p.name)) continue;
    grads.push_back(p.tensor.grad());
  }
  return grads;
}

StepResult Runtime::Step(int64_t step, const std::function<StopWish()>& stop_requested) {
  // The forward changes buffers (BatchNorm's running statistics) before the step is known to
  // complete: a step a peer's failure interrupts puts them back, so that the state a rank that
  // parks keeps is the one of the steps it completed. Others never keep it: no copy.
  if (!placement_.park) return TrainStep(step, stop_requested);
  if (step_buffers_.size() != stage_->buffers().size()) {
    step_buffers_ = stage_->CopyBuffers();
  } else {
    for (size_t i = 0; i < step_buffers_.size(); ++i) {
      step_buffers_[i].copy_(stage_->buffers()[i].tensor.detach());
    }
  }
  try {
    return TrainStep(step, stop_requested);
  } catch (const PeerError&) {
    if (completed_steps_ == step) stage_->RestoreBuffers(step_buffers_);
    throw;
  }
}

StepResult Runtime::Update(int64_t step, const torch::Tensor& totals) {
  StepResult result;
  result.grad_norm = std::sqrt(totals[0].item<double>());
  result.loss = totals[1].item<double>();
  result.stop = totals[2].item<double>() > 0;
  // Held only when every rank that asked to stop asked to hold: a plain stop (a user's, during
  // the morph) on any rank means the job may end here, and its state must reach storage.
  const double stops = totals[2].item<double>(), holds = totals[3].item<double>();
  result.hold = holds > 0 && holds == stops;
  // Past the all-reduce every rank takes this step (or skips it, all alike): what this rank
  // holds from here on is the state after it.
  completed_steps_ = step + 1;
  result.lr = options_.lr.At(step);
  // The gradients are multiplied by `unscale` once, for the loss scale and the clipping together.
  double unscale = 1;
  if (scaler_) {
    result.loss_scale = scaler_->scale();
    // Decided from the all-reduced norm: a rank whose own gradients overflowed made it
    // non-finite for everyone, so every rank skips this step.
    result.skipped = scaler_->Update(totals[0].item<double>());
    unscale = 1.0 / result.loss_scale;
    result.grad_norm *= unscale;
  }
  if (options_.clip_norm > 0 && !result.skipped) {
    const double coef = options_.clip_norm / (result.grad_norm + 1e-6);
    if (coef < 1) unscale *= coef;
  }
  if (unscale != 1 && !result.skipped) {
    torch::NoGradGuard no_grad;
    if (auto grads = Gradients(); !grads.empty()) at::_foreach_mul_(grads, unscale);
  }
  // A skipped step changes nothing: the parameters and optimizer state stay as they were.
  if (!result.skipped) {
    if (before_update_) std::exchange(before_update_, nullptr)();
    optimizer_->Step(result.lr);
    if (sharded_) ShareUpdatedParameters();
  }
  return result;
}

StepResult Runtime::TrainStep(int64_t step, const std::function<StopWish()>& stop_requested) {
  if (!options_.sample_trace.empty() && placement_.stage() == 0) TraceSamples(step);
  if (auto grads = Gradients(); !grads.empty()) at::_foreach_zero_(grads);
  std::unique_ptr<StepTrace> trace;
  std::unique_ptr<KernelTrace> kernels;  // on a GPU: the traced step's kernels
  if (!options_.trace_path.empty() && steps_run_ == kTracedStep) {
    std::function<void()> settle;
    if (device_.is_cuda()) settle = [] { torch::cuda::synchronize(); };
    trace = std::make_unique<StepTrace>(placement_.rank, placement_.stage(), placement_.replica(),
                                        std::move(settle));
    if (device_.is_cuda()) kernels = StartKernelTrace();
  }
  ++steps_run_;
  const auto step_start = StepTrace::Clock::now();
  double wait_s = 0;
  // Times a phase of waiting for peers, and into the trace when there is one.
  auto phase = [&](const char* name, const std::function<void()>& run) {
    const auto start = StepTrace::Clock::now();
    run();
    const auto end = trace ? trace->Now() : StepTrace::Clock::now();
    wait_s += std::chrono::duration<double>(end - start).count();
    if (trace) trace->Add(name, start, end);
  };
  for (auto& sync : buffer_syncs_) sync->BeginStep();
  PipelineContext ctx = Context(step, share_.first_micro_batch);
  ctx.reducer = reducer_.get();
  ctx.loss_scale = 1.0 / static_cast<double>(options_.global_batch);
  if (scaler_) ctx.grad_scale = scaler_->scale();
  ctx.trace = trace.get();
  ctx.wait_s = &wait_s;
  ctx.abandoned = [&] { return stop_requested() == StopWish::kAbandon; };
  const double loss = RunPipelineStep(ctx, schedule_, num_micro_batches(),
                                      [&](int mb) { return MicroBatch(step, mb); });
  phase("reduce", [&] {
    comm_->WaitSends();
    if (reducer_) reducer_->Finish();
  });
  phase("tied", [&] { tied_->SumGradients(*comm_); });
  if (!buffer_syncs_.empty()) {
    phase("buffers", [&] {
      for (auto& sync : buffer_syncs_) sync->EndStep();
    });
  }
  // The first step after a resume: the state still arriving from peers, before anything is
  // reduced or updated (a failed transfer fails the step on every rank alike).
  const bool first_after_resume = in_flight_ != nullptr;
  if (in_flight_) phase("state", [&] { AwaitStateFromPeers(); });

  // One all-reduce per step carries the squared gradient norm (replica 0 of every stage, tied
  // copies once), the loss (last stages) and the stop wishes (everyone).
  // Every gradient's norm at once (one kernel on a GPU), squared and summed in double on the
  // stage's device, read once: one wait for a GPU per step instead of one per parameter.
  double squared_norm = 0;
  if (placement_.replica() == 0) {
    if (auto grads = Gradients(/*tied_copies=*/false); !grads.empty()) {
      squared_norm = torch::stack(at::_foreach_norm(grads)).to(torch::kFloat64).pow(2).sum()
                         .item<double>();
    }
  }
  const StopWish wish = stop_requested();
  if (wish == StopWish::kAbandon) {
    throw PeerError("the step in flight was given up before its all-reduce: a peer failed");
  }
  auto totals = torch::tensor({squared_norm, loss, wish != StopWish::kNone ? 1.0 : 0.0,
                               wish == StopWish::kHold ? 1.0 : 0.0},
                              torch::kFloat64);
  if (first_after_resume) totals = torch::cat({totals, ResumeTimeSlots()});
  std::vector<torch::Tensor> buffers{totals};
  phase("sync", [&] {
    comm_->Wait(comm_->global().allreduce(buffers),
                "the step's all-reduce of loss and gradient norm");
  });
  if (first_after_resume) TakeSlowestResumeTimes(totals.narrow(0, 4, totals.numel() - 4));
  const auto update_start = StepTrace::Clock::now();

  StepResult result = Update(step, totals);
  result.wait_s = wait_s;
  result.compute_s = std::max(
      0.0, std::chrono::duration<double>(StepTrace::Clock::now() - step_start).count() - wait_s);
  if (trace) {
    trace->Add("update", update_start, trace->Now());
    if (Status s = trace->Write(options_.trace_path); !s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", placement_.rank, s.message().c_str());
    }
  }
  if (kernels) {
    if (Status s = kernels->Write(KernelTracePath(options_.trace_path)); !s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", placement_.rank, s.message().c_str());
    }
  }
  return result;
}

EvalResult Runtime::Evaluate(const Dataset& dataset,
                             const std::vector<std::pair<std::string, MetricFn>>& metrics,
                             int64_t max_samples, int64_t chunk_size) {
  int64_t n = dataset.Size();
  if (max_samples > 0) n = std::min(n, max_samples);
  const int64_t chunk = chunk_size > 0 ? chunk_size : options_.chunk_size;
  std::vector<MetricFn> fns;
  for (const auto& [name, fn] : metrics) fns.push_back(fn);

  // The samples in order, cut as a training batch would be; with fewer micro-batches than
  // replicas, the last replicas have nothing to do.
  planner::BatchShare share;
  const int replicas = placement_.num_replicas();
  if (n > 0) {
    const int busy = static_cast<int>(std::min<int64_t>(replicas, planner::NumMicroBatches(n, chunk)));
    if (placement_.replica() < busy) share = planner::ShareOf(n, chunk, busy, placement_.replica());
  }
  const auto schedule = planner::BuildForwardOnlySchedule(
      layout_, placement_.stage(), static_cast<int>(share.micro_batches));
  const PipelineContext ctx = Context(ForwardKey::kEvalStep, share.first_micro_batch);
  const bool was_training = stage_->training();
  stage_->SetTraining(false);
  std::vector<double> sums = RunEvalPipeline(
      ctx, schedule, static_cast<int>(share.micro_batches),
      [&](int mb) {
        const planner::SampleRange range =
            planner::MicroBatchSamples(n, chunk, share.first_micro_batch + mb);
        std::vector<int64_t> indices;
        for (int64_t i = range.begin; i < range.end; ++i) indices.push_back(i);
        cutpoint::Activations batch = Collate(dataset, indices);
        ToDevice(batch);
        return batch;
      },
      fns);
  comm_->WaitSends();
  stage_->SetTraining(was_training);

  auto totals = torch::tensor(sums, torch::kFloat64);
  std::vector<torch::Tensor> buffers{totals};
  comm_->Wait(comm_->global().allreduce(buffers), "the evaluation's all-reduce of its sums");
  EvalResult result;
  result.samples = n;
  const double per = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  result.loss = totals[0].item<double>() * per;
  for (size_t i = 0; i < metrics.size(); ++i) {
    result.metrics.emplace_back(metrics[i].first, totals[i + 1].item<double>() * per);
  }
  return result;
}

std::string Runtime::DescribeSettings() const {
  std::ostringstream out;
  out << "optimizer " << optimizer_->Describe() << "; " << options_.lr.Describe() << "; clip ";
  if (options_.clip_norm > 0) {
    out << "global norm " << options_.clip_norm;
  } else {
    out << "off";
  }
  out << "; batch " << options_.global_batch << " in micro-batches of " << options_.chunk_size
      << (spec_.micro_batch_independent ? "" : " (fixed for the job)") << "; schedule "
      << planner::ScheduleName(options_.schedule) << (options_.recompute ? " with recompute" : "")
      << (planner::Uneven(placement_.shares)
              ? "; replicas' micro-batches " + planner::SharesText(placement_.shares)
              : "")
      << (sharded_ ? "; optimizer state sharded over the replicas (ZeRO-1)" : "")
      << "; sampler "
      << (options_.custom_sampler ? "the program's own" : SamplerKindName(options_.sampler))
      << "; seed " << options_.seed;
  if (options_.precision != Precision::kFp32 || !device_.is_cpu()) {
    out << "; precision " << PrecisionName(options_.precision) << " on " << device_.str();
  }
  if (scaler_) out << "; dynamic loss scale from " << options_.loss_scaler.initial_scale;
  return out.str();
}

}  // namespace mitra::worker
