// InferenceModel: the whole model in one process, from a checkpoint, for evaluation and
// prediction.
//
//   auto model = mitra::worker::InferenceModel::Load(spec, "mitra-run/checkpoints");
//   Activations out = (*model)->Forward(batch);      // every segment, evaluation mode
//
// Load() takes a checkpoint written in any shape (a step-N directory, or a checkpoint directory,
// whose newest valid checkpoint is used) or a file written by `mitra checkpoint export`. Every
// segment is built in this process and gets its parameters and buffers from the checkpoint;
// the model stays in evaluation mode (BatchNorm uses its running statistics, dropout is off).
// Not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/cutpoint/model.h"
#include "mitra/worker/data.h"
#include "mitra/worker/runtime.h"
#include "mitra/worker/stage.h"

namespace mitra::worker {

class InferenceModel {
 public:
  // InvalidArgument when `path` holds another model's checkpoint (names the difference),
  // NotFound when it holds none, IoError for a damaged one.
  static Result<std::unique_ptr<InferenceModel>> Load(const cutpoint::ModelSpec& spec,
                                                      const std::string& path);

  // Runs every segment on `batch` without autograd.
  cutpoint::Activations Forward(const cutpoint::Activations& batch);

  // The model's loss (spec.loss) and metrics over samples [0, n) of `dataset` (n: its size, or
  // `max_samples` when smaller and > 0), in batches of `batch_size`: means over the samples,
  // as Runtime::Evaluate reports them.
  EvalResult Evaluate(const Dataset& dataset,
                      const std::vector<std::pair<std::string, MetricFn>>& metrics,
                      int64_t max_samples = 0, int64_t batch_size = 64);

  const Stage& stage() const { return *stage_; }
  int64_t step() const { return step_; }  // steps trained when the checkpoint was written

 private:
  InferenceModel(const cutpoint::ModelSpec& spec, std::unique_ptr<Stage> stage)
      : spec_(spec), stage_(std::move(stage)) {}
  Status LoadCheckpoint(const std::string& dir);
  Status LoadExport(const std::string& file);

  cutpoint::ModelSpec spec_;
  std::unique_ptr<Stage> stage_;
  int64_t step_ = 0;
};

}  // namespace mitra::worker
