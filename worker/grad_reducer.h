// GradReducer: data-parallel gradient reduction in buckets, overlapped with the backward pass.
//
// Parameters are grouped into buckets of about `bucket_elements`, in reverse registration order
// (the order in which backward produces their gradients). During the step's final backward a
// hook on each parameter copies its finished gradient (what was accumulated over the earlier
// micro-batches plus this one) into its bucket; a full bucket starts its all-reduce at once, while
// backward goes on. Buckets start strictly in index order, so every replica issues the same
// collectives in the same order. The all-reduce is a SUM: the loss is already normalised by the
// global batch.
//
// Used by the training thread only (autograd runs CPU hooks on the calling thread).
#pragma once

#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "worker/comm.h"
#include "mitra/worker/stage.h"

namespace mitra::worker {

class GradReducer {
 public:
  GradReducer(const std::vector<NamedTensor>& parameters, c10d::ProcessGroup* group, Comm* comm,
              int64_t bucket_elements);
  // Removes its hooks from the parameters: they may outlive it (a Python module a program
  // keeps, or builds once, is trained again by the next generation's runtime).
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // The next backward is the step's last one: feed its gradients to the buckets.
  void Arm() { armed_ = true; }
  // Starts what the hooks did not (parameters without a gradient this step), waits for every
  // bucket, and writes the reduced gradients back into the parameters' .grad.
  void Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<int> members;  // parameter indices
    std::vector<int64_t> offsets;
    int ready = 0;
    c10::intrusive_ptr<c10d::Work> work;
  };

  void OnGradient(int param, const torch::Tensor& grad);
  void LaunchReadyBuckets();

  std::vector<torch::Tensor> params_;
  std::vector<unsigned> hooks_;  // params_[i]'s hook, to remove
  std::vector<std::pair<int, int>> slot_;  // param -> (bucket, member index)
  std::vector<bool> filled_;
  std::vector<Bucket> buckets_;
  c10d::ProcessGroup* group_;
  Comm* comm_;
  bool armed_ = false;
  int next_launch_ = 0;
};

}  // namespace mitra::worker
