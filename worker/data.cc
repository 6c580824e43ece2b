#include "worker/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace mitra::worker {

Sampler::Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed)
    : size_(dataset_size), global_batch_(global_batch), seed_(seed) {
  TORCH_CHECK(size_ > 0, "the dataset is empty: give it at least one sample");
  TORCH_CHECK(global_batch_ > 0, "the global batch must be at least 1");
}

const torch::Tensor& Sampler::Permutation(int64_t epoch) {
  if (epoch != cached_epoch_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ULL +
                                                        static_cast<uint64_t>(epoch));
    cached_ = torch::randperm(size_, gen, torch::kInt64);
    cached_epoch_ = epoch;
  }
  return cached_;
}

std::vector<int64_t> Sampler::Indices(int64_t step, int64_t offset, int64_t count) {
  std::vector<int64_t> out;
  out.reserve(count);
  for (int64_t j = 0; j < count; ++j) {
    const int64_t position = step * global_batch_ + offset + j;
    out.push_back(Permutation(position / size_).data_ptr<int64_t>()[position % size_]);
  }
  return out;
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
