// A small convolutional image classifier with BatchNorm as a CutPoint model:
//
//   stem   conv 3x3 (1 -> w), BatchNorm, ReLU                               28 x 28
//   block1 residual block, stride 2 (w -> 2w): two conv 3x3 with BatchNorm   14 x 14
//   block2 residual block, stride 2 (2w -> 4w)                                7 x 7
//   head   global average pool, dropout, linear (4w -> 10)
//
// BatchNorm makes every sample's result depend on the others in its micro-batch, so the model
// is not micro-batch independent: the micro-batch size is fixed for the job, and mitra keeps
// the replicas' running statistics equal (worker/step/buffer_sync.h).
#pragma once

#include <cstdint>

#include "mitra/cutpoint/model.h"
#include "worker/step/pipeline.h"

namespace mitra::examples {

struct ClassifierConfig {
  int64_t width = 16;   // channels of the stem; the blocks double it twice
  double dropout = 0;   // before the final linear layer, in training
};

// Segments "stem", "block1", "block2", "head". Batches hold "image" [N, 1, 28, 28] and "label"
// [N]; the loss is the cross-entropy summed over the samples.
cutpoint::ModelSpec MakeClassifierSpec(const ClassifierConfig& config);

// Correct predictions in a micro-batch (a metric for evaluation: sums, like the loss).
worker::MetricFn CorrectPredictions();

}  // namespace mitra::examples
