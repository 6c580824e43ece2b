#include "mitra/worker/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace mitra::worker {
namespace {

class ShuffledSampler : public Sampler {
 public:
  ShuffledSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}

  int64_t IndexAt(int64_t position) override {
    const int64_t epoch = position / size_;
    if (epoch != cached_epoch_) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL +
                                                          static_cast<uint64_t>(epoch));
      cached_ = torch::randperm(size_, gen, torch::kInt64);
      cached_epoch_ = epoch;
    }
    return cached_.data_ptr<int64_t>()[position % size_];
  }

 private:
  int64_t size_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  torch::Tensor cached_;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {}
  int64_t IndexAt(int64_t position) override { return position % size_; }

 private:
  int64_t size_;
};

}  // namespace

Result<SamplerKind> ParseSamplerKind(const std::string& name) {
  if (name == "shuffled") return SamplerKind::kShuffled;
  if (name == "sequential") return SamplerKind::kSequential;
  return Status::InvalidArgument("unknown sampler '" + name +
                                 "' (expected shuffled or sequential, or supply your own)");
}

const char* SamplerKindName(SamplerKind kind) {
  switch (kind) {
    case SamplerKind::kShuffled: return "shuffled";
    case SamplerKind::kSequential: return "sequential";
  }
  return "?";
}

SamplerFactory MakeSamplerFactory(SamplerKind kind) {
  if (kind == SamplerKind::kSequential) {
    return [](int64_t size, uint64_t) -> std::unique_ptr<Sampler> {
      return std::make_unique<SequentialSampler>(size);
    };
  }
  return [](int64_t size, uint64_t seed) -> std::unique_ptr<Sampler> {
    return std::make_unique<ShuffledSampler>(size, seed);
  };
}

cutpoint::Activations Collate(const Dataset& dataset, const std::vector<int64_t>& indices) {
  std::map<std::string, std::vector<torch::Tensor>> columns;
  for (int64_t index : indices) {
    for (auto& [name, t] : dataset.Get(index)) columns[name].push_back(std::move(t));
  }
  cutpoint::Activations batch;
  for (auto& [name, list] : columns) batch.emplace(name, torch::stack(list));
  return batch;
}

}  // namespace mitra::worker
