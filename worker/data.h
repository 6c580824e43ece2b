// Data: a dataset of samples addressed by global index, and the sampler that decides which
// samples every step consumes.
//
// The order is a pure function of (seed, epoch, step): step k consumes positions
// [k*B, (k+1)*B) of the concatenation of per-epoch permutations, whatever the shape of the job.
// Replica d takes a contiguous slice of those B samples (ShareOf), and each replica cuts its
// slice into micro-batches. A resumed or reshaped job therefore sees exactly the samples the
// uninterrupted job would have seen.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "cutpoint/activations.h"

namespace mitra::worker {

// Implementations must be safe to call from the training thread while nothing else mutates
// them; Get() is called for every sample of every step this rank needs.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t Size() const = 0;
  // One sample: tensors without a batch dimension. All samples have the same names and shapes.
  virtual cutpoint::Activations Get(int64_t index) const = 0;
};

class Sampler {
 public:
  Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed);

  // Dataset indices of samples [offset, offset+count) of step `step`'s global batch.
  std::vector<int64_t> Indices(int64_t step, int64_t offset, int64_t count);

  int64_t global_batch() const { return global_batch_; }

 private:
  const torch::Tensor& Permutation(int64_t epoch);

  int64_t size_;
  int64_t global_batch_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  torch::Tensor cached_;
};

// Stacks samples into a batch (a new leading dimension).
cutpoint::Activations Collate(const Dataset& dataset, const std::vector<int64_t>& indices);

}  // namespace mitra::worker
