// Data: a dataset of samples addressed by global index, and the samplers that decide which
// samples every step consumes.
//
// Step k consumes positions [k B, (k + 1) B) of an endless stream of samples; a Sampler says
// which dataset index sits at each position, as a pure function of the position (given the
// dataset's size and the job's seed), whatever the shape of the job. The step's batch is cut
// into micro-batches and shared among the replicas as mitra/planner/batch_split.h says. A resumed
// or reshaped job therefore sees exactly the samples the uninterrupted job would have seen.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "mitra/common/status.h"
#include "mitra/cutpoint/activations.h"

namespace mitra::worker {

// Get() is called for every sample of every step this rank needs, and only for those: only the
// first and last stages of a pipeline load data, each its own replica's samples. A dataset that
// reads its storage lazily (on the first Get, or per sample) therefore costs the stages in
// between nothing. Called from the training thread only.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t Size() const = 0;
  // One sample: tensors without a batch dimension. All samples have the same names and shapes.
  virtual cutpoint::Activations Get(int64_t index) const = 0;

  // Loading ahead (the Python package's loader_workers): how many steps after the current one
  // the dataset wants to hear of; 0 (the default) for none.
  virtual int PrefetchSteps() const { return 0; }
  // The indices that one coming step will Get on this rank, in order: a hint, called at most
  // once per step and from the training thread. Get returns the same sample whether or not the
  // hint came, so the samples are those of the synchronous path in every shape.
  virtual void Prefetch(const std::vector<int64_t>& /*indices*/) const {}
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The dataset index at `position` of the stream, in [0, dataset size). Must depend on nothing
  // but the position (and what the sampler was made with); may cache.
  virtual int64_t IndexAt(int64_t position) = 0;
};

// Makes the job's sampler for a dataset of `dataset_size` samples (>= 1) and the job's seed.
using SamplerFactory =
    std::function<std::unique_ptr<Sampler>(int64_t dataset_size, uint64_t seed)>;

// The built-in samplers. kShuffled: every epoch a new permutation of the dataset,
// torch::randperm seeded by (seed, epoch). kSequential: 0, 1, 2, ... wrapping around at the end
// of the dataset.
enum class SamplerKind { kShuffled, kSequential };

// "shuffled" | "sequential"; else InvalidArgument naming them.
Result<SamplerKind> ParseSamplerKind(const std::string& name);
const char* SamplerKindName(SamplerKind kind);
SamplerFactory MakeSamplerFactory(SamplerKind kind);

// Stacks samples into a batch (a new leading dimension).
cutpoint::Activations Collate(const Dataset& dataset, const std::vector<int64_t>& indices);

}  // namespace mitra::worker
