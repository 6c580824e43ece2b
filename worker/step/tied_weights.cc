#include "worker/step/tied_weights.h"

#include <algorithm>

#include <torch/torch.h>

namespace mitra::worker {
namespace {
int TagOf(int group, int kind) { return 1000000 + group * 2 + kind; }
}  // namespace

Result<TiedWeights> TiedWeights::Create(const cutpoint::ModelSpec& spec,
                                        const cutpoint::Partition& partition,
                                        const planner::ChunkLayout& layout,
                                        const Placement& placement, const Stage& stage) {
  TiedWeights tw;
  tw.stage_ = stage.index();
  tw.placement_ = &placement;
  for (const auto& tie : spec.tied_weights) {
    Group g;
    for (size_t m = 0; m < tie.members.size(); ++m) {
      const std::string& member = tie.members[m];
      int segment = -1;
      for (int i = 0; i < spec.num_segments(); ++i) {
        if (spec.segments[i].name == cutpoint::SplitQualifiedName(member).first) segment = i;
      }
      const int holder = layout.StageOf(partition.StageOf(segment));
      if (std::find(g.stages.begin(), g.stages.end(), holder) == g.stages.end()) {
        g.stages.push_back(holder);
      }
      if (m == 0) g.source_stage = holder;
      if (m > 0) tw.secondary_.push_back(member);
      if (holder != stage.index()) continue;
      torch::Tensor t = stage.Find(member);
      if (!t.defined()) {
        return Status::InvalidArgument("tied weight '" + tie.name + "': segment '" +
                                       cutpoint::SplitQualifiedName(member).first +
                                       "' has no parameter '" +
                                       cutpoint::SplitQualifiedName(member).second + "'");
      }
      if (m == 0) g.local_has_first = true;
      g.local.push_back(t);
    }
    std::sort(g.stages.begin(), g.stages.end());
    tw.groups_.push_back(std::move(g));
  }
  return tw;
}

std::vector<int> TiedWeights::PeerRanks(const Group& g) const {
  std::vector<int> ranks;
  for (int s : g.stages) {
    if (s != stage_) ranks.push_back(placement_->stage_map.RankOf(s, placement_->replica()));
  }
  return ranks;
}

void TiedWeights::SyncInitialValues(Comm& comm) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (g.local.empty()) continue;
    torch::Tensor value;
    if (g.local_has_first) {
      value = g.local[0];
      for (int peer : PeerRanks(g)) comm.SendTensors({value}, peer, TagOf(i, 0));
    } else {
      value = torch::empty_like(g.local[0]);
      std::vector<torch::Tensor> into{value};
      comm.RecvTensors(into, placement_->stage_map.RankOf(g.source_stage, placement_->replica()),
                       TagOf(i, 0), "the initial value of a tied weight");
    }
    for (auto& t : g.local) t.copy_(value);
  }
  comm.WaitSends();
}

void TiedWeights::SumGradients(Comm& comm) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (g.local.empty()) continue;
    auto grad_of = [](const torch::Tensor& t) {
      return t.grad().defined() ? t.grad() : torch::zeros_like(t);
    };
    torch::Tensor partial = grad_of(g.local[0]).clone();
    for (size_t m = 1; m < g.local.size(); ++m) partial += grad_of(g.local[m]);
    // Every holder adds the per-stage partial sums in stage order: identical results everywhere.
    std::vector<torch::Tensor> partials(g.stages.size());
    for (size_t k = 0; k < g.stages.size(); ++k) {
      if (g.stages[k] == stage_) {
        partials[k] = partial;
      } else {
        const int peer = placement_->stage_map.RankOf(g.stages[k], placement_->replica());
        comm.SendTensors({partial}, peer, TagOf(i, 1));
        partials[k] = torch::empty_like(partial);
      }
    }
    for (size_t k = 0; k < g.stages.size(); ++k) {
      if (g.stages[k] == stage_) continue;
      std::vector<torch::Tensor> into{partials[k]};
      comm.RecvTensors(into, placement_->stage_map.RankOf(g.stages[k], placement_->replica()),
                       TagOf(i, 1), "tied-weight gradients");
    }
    torch::Tensor total = partials[0].clone();
    for (size_t k = 1; k < partials.size(); ++k) total += partials[k];
    for (auto& t : g.local) {
      if (t.grad().defined()) t.mutable_grad().copy_(total); else t.mutable_grad() = total.clone();
    }
  }
  comm.WaitSends();
}

bool TiedWeights::IsSecondaryCopy(const std::string& qualified_name) const {
  return std::find(secondary_.begin(), secondary_.end(), qualified_name) != secondary_.end();
}

}  // namespace mitra::worker
