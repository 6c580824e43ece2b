#include "worker/step/buffer_sync.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

namespace mitra::worker {
namespace {

template <typename Module>
bool IsBatchNorm(const torch::nn::Module& m, c10::optional<double>* momentum) {
  auto* bn = dynamic_cast<const Module*>(&m);
  if (bn == nullptr || !bn->options.track_running_stats()) return false;
  *momentum = bn->options.momentum();
  return true;
}

// LibTorch's BatchNorm modules, and other modules that keep the same running statistics.
bool KeepsRunningStatistics(const torch::nn::Module& m, c10::optional<double>* momentum) {
  if (IsBatchNorm<torch::nn::BatchNorm1dImpl>(m, momentum) ||
      IsBatchNorm<torch::nn::BatchNorm2dImpl>(m, momentum) ||
      IsBatchNorm<torch::nn::BatchNorm3dImpl>(m, momentum)) {
    return true;
  }
  auto* stats = dynamic_cast<const cutpoint::RunningStatistics*>(&m);
  if (stats == nullptr) return false;
  *momentum = stats->momentum();
  return true;
}

}  // namespace

std::unique_ptr<BufferSync> BufferSync::Create(const Stage& stage, Comm* comm) {
  if (stage.buffers().empty() || comm->data_parallel() == nullptr) return nullptr;
  return Create(stage, comm, comm->data_parallel(), stage.segment_ids());
}

std::unique_ptr<BufferSync> BufferSync::Create(const Stage& stage, Comm* comm,
                                               c10d::ProcessGroup* group,
                                               const std::vector<int>& segments) {
  if (group == nullptr || group->getSize() < 2) return nullptr;
  std::unique_ptr<BufferSync> sync(new BufferSync(stage, comm, group));
  const auto mine = [&](int segment) {
    return std::find(segments.begin(), segments.end(), segment) != segments.end();
  };
  for (size_t i = 0; i < stage.buffers().size(); ++i) {
    if (mine(stage.SegmentOfBuffer(i))) sync->members_.push_back(i);
  }
  if (sync->members_.empty()) return nullptr;
  auto index_of = [&](const torch::Tensor& t) -> int64_t {
    for (size_t m = 0; m < sync->members_.size(); ++m) {
      if (stage.buffers()[sync->members_[m]].tensor.is_same(t)) return static_cast<int64_t>(m);
    }
    return -1;
  };
  for (size_t k = 0; k < stage.segments().size(); ++k) {
    if (!mine(stage.segment_ids()[k])) continue;
    for (const auto& item : stage.segments()[k]->modules(/*include_self=*/true)) {
      c10::optional<double> momentum;
      const torch::nn::Module& m = *item;
      if (!KeepsRunningStatistics(m, &momentum)) continue;
      auto buffers = m.named_buffers(/*recurse=*/false);
      const int64_t mean = index_of(buffers["running_mean"]);
      const int64_t var = index_of(buffers["running_var"]);
      const int64_t count = index_of(buffers["num_batches_tracked"]);
      if (mean < 0 || var < 0 || count < 0) continue;
      RunningStats s;
      s.mean = static_cast<size_t>(mean);
      s.var = static_cast<size_t>(var);
      s.count = static_cast<size_t>(count);
      s.cumulative = !momentum.has_value();
      s.momentum = momentum.value_or(0);
      sync->stats_.push_back(s);
    }
  }
  int64_t offset = 0;
  for (size_t m : sync->members_) {
    sync->offsets_.push_back(offset);
    offset += stage.buffers()[m].tensor.numel();
  }
  sync->offsets_.push_back(offset);
  return sync;
}

torch::Tensor BufferSync::Flatten() const {
  std::vector<torch::Tensor> parts;
  for (size_t m : members_) {
    parts.push_back(stage_.buffers()[m].tensor.detach().reshape({-1}).to(torch::kFloat64));
  }
  return torch::cat(parts);
}

void BufferSync::BeginStep() { start_ = Flatten(); }

void BufferSync::EndStep() {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> input{Flatten()};
  const int replicas = group_->getSize();
  std::vector<std::vector<torch::Tensor>> output(1);
  for (int d = 0; d < replicas; ++d) output[0].push_back(torch::empty_like(input[0]));
  comm_->Wait(group_->allgather(output, input),
              "exchanging buffers with the other replicas");
  const std::vector<torch::Tensor>& got = output[0];

  torch::Tensor result = got[0].clone();  // replica 0's buffers, unless combined below
  auto slice = [&](const torch::Tensor& flat, size_t buffer) {
    return flat.slice(0, offsets_[buffer], offsets_[buffer + 1]);
  };
  for (const RunningStats& s : stats_) {
    const double t0 = slice(start_, s.count).item<double>();
    double total = 0;  // updates over all replicas this step
    for (int d = 0; d < replicas; ++d) total += slice(got[d], s.count).item<double>() - t0;
    for (size_t buffer : {s.mean, s.var}) {
      const torch::Tensor r0 = slice(start_, buffer);
      torch::Tensor r = r0.clone();
      if (s.cumulative) {
        // Each replica's average over t0 + n_d updates holds the sum of its n_d new values.
        torch::Tensor sum = r0 * t0;
        for (int d = 0; d < replicas; ++d) {
          const double n = slice(got[d], s.count).item<double>() - t0;
          sum += slice(got[d], buffer) * (t0 + n) - r0 * t0;
        }
        if (t0 + total > 0) r = sum / (t0 + total);
      } else {
        // Replica d applied r -> a r + c with a = (1 - m)^n; compose the maps in replica order.
        for (int d = 0; d < replicas; ++d) {
          const double n = slice(got[d], s.count).item<double>() - t0;
          const double a = std::pow(1 - s.momentum, n);
          r = r * a + (slice(got[d], buffer) - r0 * a);
        }
      }
      slice(result, buffer).copy_(r);
    }
    slice(result, s.count).fill_(t0 + total);
  }
  for (size_t m = 0; m < members_.size(); ++m) {
    const torch::Tensor& b = stage_.buffers()[members_[m]].tensor;
    b.copy_(slice(result, m).to(b.scalar_type()).view(b.sizes()));
  }
}

}  // namespace mitra::worker
