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
// When each pipeline has its own partition, a rank's parameters are reduced over several groups
// (worker/step/pipeline_partitions.h): each group's parameters fill buckets of their own, built
// alike on every member, and a group's buckets start in the same order on every member.
//
// With several chunks per rank (interleaved, zb-v) each chunk's parameters have their own final
// backward: the runtime arms a chunk's parameters only (Arm(params)).
//
// Under a zero-bubble schedule a backward is a B and a W (mitra/cutpoint/linear.h), and a parameter's
// gradient may come in two parts, one computed in B and one left for W: no hook can tell when it
// is whole. There the runtime says instead: after a chunk's final B, each of its parameters that
// no W still to run adds to is whole; during its last W, each parameter once no later work of
// it adds to it (Fill). Their buckets start then.
//
// Used by the training thread, and by autograd's thread for the stage's device while the
// training thread waits in backward() (autograd runs CPU hooks on the calling thread, a GPU's
// on a thread of its own). No exception leaves a hook through autograd, which on a device
// thread can end the process: an all-reduce that cannot start (a broken communicator) stops
// the launches, and Finish reports it as a PeerError.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"

namespace mitra::worker {

class GradReducer {
 public:
  // The parameters (indices into `parameters`) that one group reduces.
  struct Reduction {
    c10d::ProcessGroup* group = nullptr;
    std::vector<int> params;
  };

  // `group` reduces every parameter.
  GradReducer(const std::vector<NamedTensor>& parameters, c10d::ProcessGroup* group, Comm* comm,
              int64_t bucket_elements);
  // Each reduction's group reduces its parameters; every parameter is in one reduction.
  GradReducer(const std::vector<NamedTensor>& parameters, std::vector<Reduction> reductions,
              Comm* comm, int64_t bucket_elements);
  // Removes its hooks from the parameters: they may outlive it (a Python module a program
  // keeps, or builds once, is trained again by the next generation's runtime).
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // The next backward is the step's last one: feed its gradients to the buckets; or the last of
  // `params` only, whose gradients go to their buckets from then on.
  void Arm() { armed_.assign(params_.size(), true); }
  void Arm(const std::vector<torch::Tensor>& params);
  // Split backwards (never armed): the gradients of `params` are whole in their .grad: into
  // their buckets, and full buckets start.
  void Fill(const std::vector<torch::Tensor>& params);
  // Starts what the hooks did not (parameters without a gradient this step), waits for every
  // bucket, and writes the reduced gradients back into the parameters' .grad. PeerError when a
  // bucket's all-reduce could not start or did not finish.
  void Finish();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets whose all-reduce has started this step.
  int buckets_started() const { return next_launch_; }

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<int> members;  // parameter indices
    std::vector<int64_t> offsets;
    int ready = 0;
    c10d::ProcessGroup* group = nullptr;
    c10::intrusive_ptr<c10d::Work> work;
  };

  // Buckets of `members` (ascending parameter indices), filled in reverse order.
  void AddBuckets(c10d::ProcessGroup* group, const std::vector<int>& members,
                  int64_t bucket_elements);

  void OnGradient(int param, const torch::Tensor& grad);
  // Copies parameter `param`'s .grad (zeros when it has none) into its bucket, once.
  void FillFromGrad(int param);
  // Starts the full buckets in index order; after an all-reduce that cannot start, none (the
  // reason is kept for Finish).
  void LaunchReadyBuckets();

  std::vector<torch::Tensor> params_;
  std::unordered_map<const c10::TensorImpl*, int> index_;  // params_[i]'s impl -> i
  std::vector<unsigned> hooks_;  // params_[i]'s hook, to remove
  std::vector<std::pair<int, int>> slot_;  // param -> (bucket, member index)
  std::vector<bool> filled_;
  std::vector<Bucket> buckets_;
  Comm* comm_;
  std::vector<bool> armed_;  // by parameter: its hook feeds its bucket
  int next_launch_ = 0;
  std::string launch_error_;  // why bucket next_launch_'s all-reduce could not start
};

}  // namespace mitra::worker
