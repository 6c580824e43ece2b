#include "worker/step/grad_reducer.h"

#include <torch/torch.h>

#include <algorithm>

namespace mitra::worker {

namespace {

std::vector<GradReducer::Reduction> AllBy(c10d::ProcessGroup* group, size_t count) {
  GradReducer::Reduction all{group, {}};
  for (size_t i = 0; i < count; ++i) all.params.push_back(static_cast<int>(i));
  return {all};
}

}  // namespace

GradReducer::GradReducer(const std::vector<NamedTensor>& parameters, c10d::ProcessGroup* group,
                         Comm* comm, int64_t bucket_elements)
    : GradReducer(parameters, AllBy(group, parameters.size()), comm, bucket_elements) {}

GradReducer::GradReducer(const std::vector<NamedTensor>& parameters,
                         std::vector<Reduction> reductions, Comm* comm, int64_t bucket_elements)
    : comm_(comm) {
  for (const auto& p : parameters) {
    index_[p.tensor.unsafeGetTensorImpl()] = static_cast<int>(params_.size());
    params_.push_back(p.tensor);
  }
  slot_.resize(params_.size());
  filled_.assign(params_.size(), false);
  armed_.assign(params_.size(), false);
  // The group whose parameters backward reaches first fills the first buckets.
  for (Reduction& r : reductions) std::sort(r.params.begin(), r.params.end());
  std::sort(reductions.begin(), reductions.end(), [](const Reduction& a, const Reduction& b) {
    return !a.params.empty() && (b.params.empty() || a.params.back() > b.params.back());
  });
  for (const Reduction& r : reductions) AddBuckets(r.group, r.params, bucket_elements);
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(params_[i].register_hook([this, i](const torch::Tensor& grad) {
      if (armed_[i]) OnGradient(static_cast<int>(i), grad);
    }));
  }
}

void GradReducer::AddBuckets(c10d::ProcessGroup* group, const std::vector<int>& members,
                             int64_t bucket_elements) {
  Bucket current;
  int64_t size = 0;
  auto close = [&] {
    if (current.members.empty()) return;
    // Every slot is written before the bucket is reduced (OnGradient, FillFromGrad): nothing
    // to zero. Zeroing it here cost a new process 0.57 s for the large GPT's stage of 200 MB
    // on two busy cores, all of it on the path of a grow.
    current.flat = torch::empty({size}, params_[current.members[0]].options());
    current.group = group;
    buckets_.push_back(std::move(current));
    current = Bucket();
    size = 0;
  };
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    const int i = *it;
    if (!current.members.empty() &&
        params_[i].scalar_type() != params_[current.members[0]].scalar_type()) {
      close();
    }
    slot_[i] = {static_cast<int>(buckets_.size()), static_cast<int>(current.members.size())};
    current.members.push_back(i);
    current.offsets.push_back(size);
    size += params_[i].numel();
    if (size >= bucket_elements) close();
  }
  close();
}

GradReducer::~GradReducer() {
  for (size_t i = 0; i < hooks_.size(); ++i) params_[i].remove_hook(hooks_[i]);
}

void GradReducer::OnGradient(int param, const torch::Tensor& grad) {
  auto [b, m] = slot_[param];
  Bucket& bucket = buckets_[b];
  auto slice = bucket.flat.narrow(0, bucket.offsets[m], params_[param].numel());
  const torch::Tensor& accumulated = params_[param].grad();
  if (accumulated.defined()) {
    torch::add_out(slice, accumulated.reshape({-1}), grad.reshape({-1}));
  } else {
    slice.copy_(grad.reshape({-1}));
  }
  if (!filled_[param]) {
    filled_[param] = true;
    ++bucket.ready;
  }
  LaunchReadyBuckets();
}

void GradReducer::FillFromGrad(int param) {
  if (filled_[param]) return;
  auto [b, m] = slot_[param];
  auto slice = buckets_[b].flat.narrow(0, buckets_[b].offsets[m], params_[param].numel());
  const torch::Tensor& g = params_[param].grad();
  if (g.defined()) slice.copy_(g.reshape({-1})); else slice.zero_();
  filled_[param] = true;
  ++buckets_[b].ready;
}

void GradReducer::Arm(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& t : params) {
    if (auto it = index_.find(t.unsafeGetTensorImpl()); it != index_.end()) armed_[it->second] = true;
  }
}

void GradReducer::Fill(const std::vector<torch::Tensor>& params) {
  for (const torch::Tensor& t : params) {
    if (auto it = index_.find(t.unsafeGetTensorImpl()); it != index_.end()) FillFromGrad(it->second);
  }
  LaunchReadyBuckets();
}

void GradReducer::LaunchReadyBuckets() {
  while (launch_error_.empty() && next_launch_ < num_buckets() &&
         buckets_[next_launch_].ready == static_cast<int>(buckets_[next_launch_].members.size())) {
    std::vector<torch::Tensor> tensors{buckets_[next_launch_].flat};
    const auto failed = [&](const std::string& why) {
      launch_error_ = "the data-parallel gradient all-reduce of bucket " +
                      std::to_string(next_launch_) + " could not start: " + why;
    };
    try {
      buckets_[next_launch_].work = buckets_[next_launch_].group->allreduce(tensors);
    } catch (const c10::Error& e) {
      return failed(e.what_without_backtrace());
    } catch (const std::exception& e) {
      return failed(e.what());
    }
    ++next_launch_;
  }
}

void GradReducer::Finish() {
  armed_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) FillFromGrad(static_cast<int>(i));
  LaunchReadyBuckets();
  if (!launch_error_.empty()) throw PeerError(launch_error_);
  for (int b = 0; b < num_buckets(); ++b) {
    Bucket& bucket = buckets_[b];
    comm_->Wait(bucket.work, "data-parallel gradient all-reduce (bucket " + std::to_string(b) + ")");
    bucket.work.reset();
    for (size_t m = 0; m < bucket.members.size(); ++m) {
      torch::Tensor& p = params_[bucket.members[m]];
      auto reduced = bucket.flat.narrow(0, bucket.offsets[m], p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(reduced);
      } else {
        p.mutable_grad() = reduced.clone();
      }
    }
    bucket.ready = 0;
  }
  filled_.assign(params_.size(), false);
  next_launch_ = 0;
}

}  // namespace mitra::worker
