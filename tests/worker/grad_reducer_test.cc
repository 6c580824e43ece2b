// GradReducer: the replicas' gradients summed in buckets during the last backward, with ranks
// as threads (tests/worker/thread_ranks.h), against gradients computed in one thread.
//
// Tolerance. Everything is float64 (tests/worker/tiny_model.h). The reducer and the reference
// add the same per-sample terms in another order (per micro-batch, then across replicas); a sum
// of n terms reordered moves by at most about n * 2^-53 of the sum of their magnitudes, here
// under 1e-14 of the largest gradient even if the terms cancel a hundredfold. We allow 1e-12.
// A real mistake (a replica or a micro-batch missing or counted twice) moves gradients by a
// sizeable fraction of themselves (the guard test shows how far).
#include "worker/step/grad_reducer.h"

#include <gtest/gtest.h>

#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "mitra/worker/stage.h"
#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"

namespace mitra::worker {
namespace {

using testing::RelativeDifference;
using testing::TinyBatch;

constexpr double kTolerance = 1e-12;
constexpr int kReplicas = 3;
constexpr int64_t kShare = 4;       // samples per replica
constexpr int64_t kMicroBatch = 2;  // two micro-batches per replica
constexpr int64_t kBatch = kReplicas * kShare;

const cutpoint::ModelSpec& Spec() {
  static const cutpoint::ModelSpec spec = testing::TinyMlp(2);
  return spec;
}

std::unique_ptr<Stage> WholeModel() {
  return std::make_unique<Stage>(Spec(), cutpoint::Partition{{2}}, 0, /*seed=*/1);
}

// Sum over the samples [begin, end) of the loss, divided by `divisor`, through the whole model.
torch::Tensor Loss(Stage& stage, int64_t begin, int64_t end, double divisor) {
  const testing::TinyDataset data(64);
  const cutpoint::Activations batch = TinyBatch(data, begin, end);
  return Spec().loss(stage.Forward(batch, {}), batch) / divisor;
}

// The mean over `replicas` of each replica's gradient of its own mean loss, computed one replica
// after the other in this thread: what data parallelism must give every replica.
std::vector<torch::Tensor> MeanOfReplicaGradients(int replicas) {
  auto stage = WholeModel();
  std::vector<torch::Tensor> mean;
  for (int r = 0; r < replicas; ++r) {
    for (const auto& p : stage->parameters()) p.tensor.mutable_grad() = torch::Tensor();
    Loss(*stage, r * kShare, (r + 1) * kShare, kShare).backward();
    for (size_t i = 0; i < stage->parameters().size(); ++i) {
      const torch::Tensor g = stage->parameters()[i].tensor.grad() / replicas;
      if (r == 0) mean.push_back(g); else mean[i] += g;
    }
  }
  return mean;
}

// How many hooks the reducer (or anything) left on `t`: LibTorch keeps a removed hook's slot
// and empties it.
int LiveHooks(const torch::Tensor& t) {
  const auto& list = torch::autograd::impl::get_autograd_meta(t)->cpp_hooks_list_;
  int n = 0;
  if (list) {
    for (const auto& hook : *list) n += hook ? 1 : 0;
  }
  return n;
}

// Each replica runs two micro-batches of its share, the loss divided by the global batch, and
// arms the reducer before the last backward. A parameter outside the graph is reduced as zeros.
TEST(GradReducer, BucketedSumEqualsTheMeanOfTheReplicasGradients) {
  const std::vector<torch::Tensor> expected = MeanOfReplicaGradients(kReplicas);
  testing::RunWithComms(1, kReplicas, [&](const Placement& p, Comm& comm) {
    auto stage = WholeModel();
    std::vector<NamedTensor> params = {
        {"unused", torch::ones({4}, torch::kFloat64).requires_grad_(true)}};
    params.insert(params.end(), stage->parameters().begin(), stage->parameters().end());
    GradReducer reducer(params, comm.data_parallel(), &comm, /*bucket_elements=*/20);
    EXPECT_EQ(reducer.num_buckets(), 3);  // {l1.bias, l1.weight}, {l0.bias, l0.weight}, {unused}
    const int64_t first = p.replica() * kShare;
    for (int64_t begin = first; begin < first + kShare; begin += kMicroBatch) {
      if (begin + kMicroBatch == first + kShare) reducer.Arm();
      Loss(*stage, begin, begin + kMicroBatch, kBatch).backward();
    }
    reducer.Finish();
    ASSERT_TRUE(params[0].tensor.grad().defined());
    EXPECT_TRUE(torch::equal(params[0].tensor.grad(), torch::zeros({4}, torch::kFloat64)));
    for (size_t i = 0; i < expected.size(); ++i) {
      const NamedTensor& param = stage->parameters()[i];
      EXPECT_LE(RelativeDifference(param.tensor.grad(), expected[i]), kTolerance)
          << param.name << " on replica " << p.replica();
    }
  });
}

// The comparison above sees a replica left out: the mean of two replicas' gradients is far
// from the mean of three.
TEST(GradReducer, GuardTheComparisonFailsWithoutAReplica) {
  const std::vector<torch::Tensor> all = MeanOfReplicaGradients(kReplicas);
  const std::vector<torch::Tensor> fewer = MeanOfReplicaGradients(kReplicas - 1);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_GT(RelativeDifference(fewer[i], all[i]), 1e6 * kTolerance) << i;
  }
}

// The same parameters are reduced again, with another bucket size, after the first reducer
// is gone: it took its hooks with it (a program may keep its model across generations).
TEST(GradReducer, RemovesItsHooksWhenDestroyed) {
  const std::vector<torch::Tensor> expected = MeanOfReplicaGradients(2);
  testing::RunWithComms(1, 2, [&](const Placement& p, Comm& comm) {
    auto stage = WholeModel();
    const torch::Tensor& weight = stage->parameters()[0].tensor;
    {
      GradReducer first(stage->parameters(), comm.data_parallel(), &comm, 1 << 20);
      EXPECT_EQ(LiveHooks(weight), 1);
      first.Arm();
    }
    EXPECT_EQ(LiveHooks(weight), 0);
    GradReducer second(stage->parameters(), comm.data_parallel(), &comm, 7);
    EXPECT_GT(second.num_buckets(), 1);
    second.Arm();
    Loss(*stage, p.replica() * kShare, (p.replica() + 1) * kShare, 2 * kShare).backward();
    second.Finish();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_LE(RelativeDifference(stage->parameters()[i].tensor.grad(), expected[i]), kTolerance)
          << stage->parameters()[i].name;
    }
  });
}

// A process group whose collectives cannot start, as NCCL's when its communicator is broken
// (it throws from allreduce itself, where Gloo reports at the wait).
class BrokenGroup : public c10d::ProcessGroup {
 public:
  BrokenGroup() : c10d::ProcessGroup(0, 2) {}
  const std::string getBackendName() const override { return "broken"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&,
                                           const c10d::AllreduceOptions&) override {
    ++calls;
    TORCH_CHECK(false, "the communicator is broken");
    return {};
  }
  int calls = 0;
};

// The hook that finds a bucket full starts its all-reduce during the backward; when that
// throws, the exception must not travel through autograd (on a GPU's autograd thread it ends
// the process): the backward completes, nothing more starts, and Finish says why, as the
// PeerError that makes the job recover.
TEST(GradReducer, AnAllReduceThatCannotStartIsAPeerErrorAfterTheBackward) {
  auto stage = WholeModel();
  BrokenGroup group;
  GradReducer reducer(stage->parameters(), &group, /*comm=*/nullptr, /*bucket_elements=*/7);
  ASSERT_GT(reducer.num_buckets(), 1);
  reducer.Arm();
  EXPECT_NO_THROW(Loss(*stage, 0, kShare, kShare).backward());
  EXPECT_EQ(group.calls, 1);  // the first full bucket tried; the others not
  EXPECT_EQ(reducer.buckets_started(), 0);
  try {
    reducer.Finish();
    ADD_FAILURE() << "Finish did not report the all-reduce that could not start";
  } catch (const PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("all-reduce of bucket 0 could not start: the communicator is broken"),
              std::string::npos) << what;
    EXPECT_EQ(what.find("Exception raised from"), std::string::npos) << what;  // no backtrace
  }
}

}  // namespace
}  // namespace mitra::worker
