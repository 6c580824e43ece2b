// Fidelity: mitra in every shape and schedule computes what one plain LibTorch loop computes.
//
// The reference below is written without the mitra runtime: one process, the whole batch in one
// forward, the tied embedding as ONE shared tensor, torch's own clip_grad_norm_ and AdamW. It
// reuses only the example's layer code (embed and block modules) and the documented sample
// order (a randperm of the dataset per epoch, seeded by (seed, epoch)).
//
// Tolerance. mitra and the reference compute the same math in a different fp32 order: the batch
// is split into micro-batches and replicas whose losses and gradients are summed (ordering the
// additions differently), the tied gradient is summed explicitly instead of by autograd, and
// the global norm is added per stage. fp32 addition of n terms reorders with a relative error of
// about n * 2^-24 ~ 1e-6 for the sums here. Losses therefore agree to ~1e-6 relative; we allow
// 2e-5 (absolute, on losses ~5.5). After one AdamW step a parameter moves by
// lr * g / (|g| + eps); a gradient error dg changes that by at most lr * dg * eps / (|g|+eps)^2 <=
// lr * dg / eps in the worst case (g ~ 0), but for the gradients here (|g| >> eps for nearly all
// elements) the change is ~lr * dg / |g| ~ lr * 1e-6. We allow 2e-6 absolute per parameter with
// lr = 1e-3, i.e. 0.2% of one step's update: loose enough for reordering, far too tight for any
// real mistake (a wrong micro-batch, a missing replica, a dropped tied gradient each move
// parameters by a sizeable fraction of lr).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>

#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_dataset.h"
#include "tests/worker/job_runner.h"

namespace mitra {
namespace {

constexpr uint64_t kSeed = 77;
constexpr int64_t kBatch = 16;
constexpr double kLr = 1e-3;
constexpr int kLossSteps = 4;
constexpr double kLossTolerance = 2e-5;
constexpr double kParamTolerance = 2e-6;

std::vector<std::string> CommonArgs() {
  return {"--model", "tiny", "--seed", std::to_string(kSeed), "--batch-size",
          std::to_string(kBatch), "--chunk-size", "4", "--lr", std::to_string(kLr),
          "--weight-decay", "0.01", "--clip", "1.0"};
}

// The reference: a plain single-process training loop.
class Reference {
 public:
  Reference() {
    auto config = *examples::GptConfig::Named("tiny");
    spec_ = examples::MakeGptSpec(config);
    dataset_ = *examples::TextDataset::Load(examples::kDefaultTextPath, config.context);
    const int n = spec_.num_segments();
    for (int i = 0; i < n; ++i) segments_.push_back(cutpoint::BuildSegment(spec_, i, kSeed));
    std::vector<torch::Tensor> params;
    for (int i = 0; i < n; ++i) {
      for (const auto& p : segments_[i]->named_parameters()) {
        const std::string name = spec_.segments[i].name + "." + p.key();
        if (name == "head.weight") continue;  // the head uses embed.wte.weight itself
        named_[name] = p.value();
        params.push_back(p.value());
      }
    }
    params_ = params;
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(kLr).weight_decay(0.01));
  }

  double Step(int64_t step) {
    std::vector<torch::Tensor> tokens, targets;
    const int64_t n = dataset_->Size();
    for (int64_t j = 0; j < kBatch; ++j) {
      const int64_t position = step * kBatch + j;
      const int64_t epoch = position / n;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(kSeed * 1000003ULL + epoch);
      const int64_t index = torch::randperm(n, gen, torch::kInt64)[position % n].item<int64_t>();
      auto sample = dataset_->Get(index);
      tokens.push_back(sample["tokens"]);
      targets.push_back(sample["targets"]);
    }
    cutpoint::Activations acts{{"tokens", torch::stack(tokens)}};
    for (size_t i = 0; i + 1 < segments_.size(); ++i) acts = segments_[i]->Forward(acts);
    auto hidden = torch::layer_norm(acts["hidden"], {hidden_width()}, named_["head.ln_f.weight"],
                                    named_["head.ln_f.bias"]);
    auto logits = torch::matmul(hidden, named_["embed.wte.weight"].t());
    auto target = torch::stack(targets);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), target.reshape({-1}));
    optimizer_->zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params_, 1.0);
    optimizer_->step();
    return loss.item<double>();
  }

  // Parameters under mitra's names; the tied copy appears under both.
  std::map<std::string, torch::Tensor> Parameters() const {
    auto out = named_;
    out["head.weight"] = named_.at("embed.wte.weight");
    return out;
  }

 private:
  int64_t hidden_width() const { return named_.at("head.ln_f.weight").size(0); }

  cutpoint::ModelSpec spec_;
  std::shared_ptr<examples::TextDataset> dataset_;
  std::vector<std::shared_ptr<cutpoint::Segment>> segments_;
  std::map<std::string, torch::Tensor> named_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
};

struct Golden {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> after_one_step;
};

const Golden& ReferenceRun() {
  static const Golden golden = [] {
    torch::set_num_threads(1);
    Golden g;
    {
      Reference ref;
      ref.Step(0);
      for (auto& [name, t] : ref.Parameters()) g.after_one_step[name] = t.detach().clone();
    }
    Reference ref;
    for (int k = 0; k < kLossSteps; ++k) g.losses.push_back(ref.Step(k));
    return g;
  }();
  return golden;
}

struct Shape {
  Shape(int p, int d, std::string s, std::vector<std::string> e, std::string sh = "")
      : stages(p), replicas(d), schedule(std::move(s)), extra(std::move(e)), shares(std::move(sh)) {}
  int stages, replicas;
  std::string schedule;
  std::vector<std::string> extra;
  std::string shares;  // MITRA_SHARES, as a planner gives replicas on machines that differ
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.stages << "x" << s.replicas << " " << s.schedule;
  for (const auto& e : s.extra) *os << " " << e;
  if (!s.shares.empty()) *os << " shares " << s.shares;
}

std::string Name(const ::testing::TestParamInfo<Shape>& info) {
  std::string name = std::to_string(info.param.stages) + "x" +
                     std::to_string(info.param.replicas) + "_";
  const auto append = [&name](const std::string& word) {
    for (char c : word) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  };
  append(info.param.schedule);  // zb-h1 -> zb_h1: test names take letters, digits and '_'
  for (const auto& e : info.param.extra) append(e);
  if (!info.param.shares.empty()) append("_shares" + info.param.shares);
  return name;
}

class Fidelity : public ::testing::TestWithParam<Shape> {};

TEST_P(Fidelity, MatchesPlainLibTorchLoop) {
  const Shape& shape = GetParam();
  const Golden& golden = ReferenceRun();
  std::map<std::string, std::string> env;
  if (!shape.shares.empty()) env["MITRA_SHARES"] = shape.shares;
  auto args = CommonArgs();
  args.insert(args.end(), {"--schedule", shape.schedule});
  args.insert(args.end(), shape.extra.begin(), shape.extra.end());

  // Loss sequence over several steps.
  auto steps = args;
  steps.insert(steps.end(), {"--steps", std::to_string(kLossSteps)});
  auto run = testing::RunJob(MITRA_GPT_TRAIN, shape.stages, shape.replicas, steps, env);
  ASSERT_TRUE(run.ok()) << run.rank_output.back();
  if (!shape.shares.empty()) {  // the shares were taken, not ignored
    EXPECT_NE(run.rank_output[0].find("replicas' micro-batches " + shape.shares),
              std::string::npos)
        << run.rank_output[0];
  }
  ASSERT_EQ(run.losses.size(), golden.losses.size()) << run.rank_output[0];
  for (size_t k = 0; k < golden.losses.size(); ++k) {
    EXPECT_NEAR(run.losses[k], golden.losses[k], kLossTolerance) << "step " << k + 1;
  }

  // Every parameter after one step.
  const std::string dump = testing::MakeTempDir("mitra-dump");
  auto one = args;
  one.insert(one.end(), {"--steps", "1", "--dump-params", dump});
  auto first = testing::RunJob(MITRA_GPT_TRAIN, shape.stages, shape.replicas, one, env);
  ASSERT_TRUE(first.ok()) << first.rank_output.back();
  std::map<std::string, torch::Tensor> got;
  for (int s = 0; s < shape.stages; ++s) {
    for (auto& [name, t] : testing::LoadTensorDict(dump + "/stage-" + std::to_string(s) + ".pt")) {
      EXPECT_TRUE(got.emplace(name, t).second) << name << " is held by two stages";
    }
  }
  std::filesystem::remove_all(dump);
  ASSERT_EQ(got.size(), golden.after_one_step.size());
  for (const auto& [name, expected] : golden.after_one_step) {
    ASSERT_TRUE(got.count(name)) << name << " missing";
    const double diff = (got[name] - expected).abs().max().item<double>();
    EXPECT_LE(diff, kParamTolerance) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fidelity,
    ::testing::Values(Shape{1, 1, "1f1b", {}}, Shape{2, 1, "gpipe", {}}, Shape{2, 1, "1f1b", {}},
                      Shape{2, 1, "varuna", {}}, Shape{1, 2, "1f1b", {}},
                      Shape{2, 2, "gpipe", {}}, Shape{2, 2, "1f1b", {}},
                      Shape{2, 2, "varuna", {}}, Shape{4, 1, "gpipe", {}},
                      Shape{4, 1, "1f1b", {}}, Shape{4, 1, "varuna", {}},
                      // Activation recomputation, a non-uniform and a parameter-balanced
                      // partition, and a batch that 3 replicas do not divide (6, 5, 5 samples
                      // in micro-batches of 4).
                      Shape{2, 2, "1f1b", {"--recompute"}}, Shape{4, 1, "gpipe", {"--recompute"}},
                      Shape{2, 1, "1f1b", {"--partition", "3,1"}},
                      Shape{2, 1, "varuna", {"--partition", "params"}},
                      Shape{1, 3, "1f1b", {}},
                      // Zero-bubble: the blocks' Linear weight gradients wait for W; the tied
                      // embedding and the norms take theirs in B.
                      Shape{2, 1, "zb-h1", {}}, Shape{2, 2, "zb-h1", {}},
                      Shape{4, 1, "zb-h1", {}}, Shape{2, 2, "zb-h1", {"--recompute"}},
                      // Two chunks per rank: the tied embedding and head share rank 0 in the
                      // V; at P = 1 every chunk's messages stay in memory.
                      Shape{2, 1, "interleaved", {}}, Shape{2, 2, "interleaved", {}},
                      Shape{1, 1, "interleaved", {}}, Shape{2, 1, "interleaved", {"--recompute"}},
                      Shape{2, 1, "zb-v", {}}, Shape{2, 2, "zb-v", {}}, Shape{1, 2, "zb-v", {}},
                      Shape{2, 1, "zb-v", {"--recompute"}}, Shape{2, 2, "zb-v", {"--zero", "1"}},
                      // Interleaved with four chunks on one rank: v from the partition's counts.
                      Shape{1, 1, "interleaved", {"--partition", "1,1,1,1"}},
                      // Uneven shares of the 4 micro-batches (replicas on machines of different
                      // speeds): the same samples, the same update.
                      Shape{1, 2, "1f1b", {}, "3,1"}, Shape{2, 2, "1f1b", {}, "1,3"},
                      Shape{1, 3, "1f1b", {}, "1,1,2"}, Shape{2, 2, "gpipe", {"--recompute"}, "3,1"},
                      Shape{2, 2, "zb-v", {"--zero", "1"}, "3,1"},
                      // Each pipeline cut its own way (a fast and a slow machine in each, or
                      // pipelines of different machines): segments reduced by their holders.
                      Shape{2, 2, "1f1b", {"--partition", "1,3/3,1"}},
                      Shape{2, 2, "gpipe", {"--partition", "3,1/2,2"}, "3,1"}),
    Name);

// The bench GPT (10 segments: more than the tiny one's 4) trained 3 steps in `stages` x
// `replicas` with `extra` arguments has the losses of the same job in 1 x 1, itself the
// reference's twin (1x1_1f1b above); rank 0 says `announced`.
void ExpectTheBenchGptsLossesInOneProcess(int stages, int replicas,
                                          const std::vector<std::string>& extra,
                                          const std::string& announced) {
  const std::vector<std::string> args{"--model", "bench", "--seed", std::to_string(kSeed),
                                      "--batch-size", "16", "--chunk-size", "4", "--steps", "3"};
  auto shaped = args;
  shaped.insert(shaped.end(), extra.begin(), extra.end());
  const testing::JobResult one = testing::RunJob(MITRA_GPT_TRAIN, 1, 1, args);
  const testing::JobResult many = testing::RunJob(MITRA_GPT_TRAIN, stages, replicas, shaped);
  ASSERT_TRUE(one.ok()) << one.rank_output[0];
  ASSERT_TRUE(many.ok()) << many.rank_output[0] << many.rank_output.back();
  EXPECT_NE(many.rank_output[0].find(announced), std::string::npos) << many.rank_output[0];
  ASSERT_EQ(many.losses.size(), 3u);
  ASSERT_EQ(one.losses.size(), 3u);
  for (size_t k = 0; k < one.losses.size(); ++k) {
    EXPECT_NEAR(many.losses[k], one.losses[k], kLossTolerance) << "step " << k + 1;
  }
}

// Interleaved with v = 3 chunks on each of 2 ranks: 6 ranges of the 10 segments, the
// partition's counts giving v.
TEST(Fidelity, InterleavedWithThreeChunksPerRankMatchesOneProcess) {
  ExpectTheBenchGptsLossesInOneProcess(
      2, 1, {"--schedule", "interleaved", "--partition", "2,2,2,1,1,2"},
      "segments [0, 2) [4, 6) [7, 8)");
}

// Each pipeline with its own partition under zb-v (two chunks a rank, the V's turn on the last
// rank): the 10 segments cut 3,2,2,3 and 1,4,4,1.
TEST(Fidelity, ZbVWithAPartitionPerPipelineMatchesOneProcess) {
  ExpectTheBenchGptsLossesInOneProcess(
      2, 2, {"--schedule", "zb-v", "--partition", "3,2,2,3/1,4,4,1"}, "partition 3,2,2,3/1,4,4,1");
}

}  // namespace
}  // namespace mitra
