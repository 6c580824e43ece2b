// The CutPoint model API: a model is a chain of segments separated by CutPoints.
//
//   mitra::cutpoint::ModelSpec spec;
//   spec.AddSegment("embed", [=] { return std::make_shared<Embedding>(cfg); });
//   for (int i = 0; i < cfg.layers; ++i)            // a CutPoint sits between consecutive
//     spec.AddSegment("block" + std::to_string(i),  // segments: each is a potential stage
//                     [=] { return std::make_shared<Block>(cfg); });   // boundary
//   spec.AddSegment("head", [=] { return std::make_shared<Head>(cfg); });
//   spec.loss = [](const Activations& out, const Activations& batch) { ... };
//   spec.TieWeights("embedding", {"embed.wte.weight", "head.weight"});
//
// Segments are built by factories, so a stage constructs only its own segments: no stage ever
// allocates another stage's layers. Factories are called with the global RNG seeded from
// (seed, segment index), so a segment's initial weights do not depend on which stage builds it.
// Parameters and buffers are named "<segment>.<name>" everywhere (checkpoints, tied weights,
// dumps).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "mitra/common/status.h"
#include "mitra/cutpoint/activations.h"
#include "mitra/cutpoint/partition.h"

namespace mitra::cutpoint {

// One segment of the chain. Implementations register their parameters like any torch module.
class Segment : public torch::nn::Module {
 public:
  // Maps the previous segment's outputs (or, for the first segment, the batch) to this
  // segment's outputs. The runtime may run it twice (activation recomputation): it restores the
  // buffers and the random generator for the second run, so random operations (dropout) that
  // draw from the default generator repeat their choices, and buffers are updated once. In
  // training mode every forward seeds that generator from (seed, step, the micro-batch's index
  // in the step, segment), so the same job draws the same numbers in every shape.
  virtual Activations Forward(const Activations& inputs) = 0;
};

// A module that keeps BatchNorm's running statistics (buffers running_mean, running_var and
// num_batches_tracked, updated r <- (1 - momentum) r + momentum x by each training forward)
// without being one of LibTorch's BatchNorm modules: a Python BatchNorm mirrored into LibTorch's
// module tree (python/src/py_segment.h). The runtime combines such statistics across replicas
// as it does LibTorch's BatchNorm's (worker/step/buffer_sync.h).
class RunningStatistics {
 public:
  virtual ~RunningStatistics() = default;
  // The update's momentum; nullopt for a cumulative average (PyTorch's momentum=None).
  virtual c10::optional<double> momentum() const = 0;
  // What it is, for messages: "BatchNorm2d".
  virtual std::string kind() const = 0;
};

using SegmentFactory = std::function<std::shared_ptr<Segment>()>;

// Loss of a micro-batch: the SUM over its samples of each sample's loss. The runtime divides by
// the global batch size, so any pipeline x data-parallel shape computes the same update.
using LossFn = std::function<torch::Tensor(const Activations& outputs, const Activations& batch)>;

// A metric of an evaluation: like the loss, the SUM over a micro-batch's samples of a per-sample
// quantity (correct predictions, say); reported divided by the number of samples evaluated.
using MetricFn = LossFn;

// Copies of one weight held by several segments (tied input/output embeddings). Members are
// qualified parameter names; the first member's initial value is copied to the others, and the
// gradients of all members are summed, so the copies stay identical.
struct TiedWeight {
  std::string name;
  std::vector<std::string> members;
};

struct SegmentDef {
  std::string name;
  SegmentFactory factory;
};

struct ModelSpec {
  std::vector<SegmentDef> segments;
  LossFn loss;
  std::vector<TiedWeight> tied_weights;
  // Tokens in one sample, for a language model's throughput (tokens/s); 0 reports samples/s
  // only.
  int64_t tokens_per_sample = 0;
  // Declares that the model computes the same whatever samples share its micro-batches (no
  // BatchNorm: every sample's loss and gradient depend on that sample alone). Then the
  // micro-batch size may change from one shape to the next; otherwise it is fixed when the job
  // starts and kept across morphs and resumes. Refused for a model that holds a module whose
  // result depends on its micro-batch (MicroBatchDependentModules).
  bool micro_batch_independent = false;
  // How exports name the model's tensors. kQualified: "<segment>.<name>". kModule: the segments
  // are pieces of one module (the Python package's ModelSpec.from_module), so a tensor's name
  // within its segment is already its key in that module's state_dict(); a weight tied across
  // segments has one key. Checkpoint files keep the qualified names either way.
  enum class StateDictKeys { kQualified, kModule };
  StateDictKeys state_dict_keys = StateDictKeys::kQualified;

  void AddSegment(std::string name, SegmentFactory factory);
  void TieWeights(std::string name, std::vector<std::string> members);
  int num_segments() const { return static_cast<int>(segments.size()); }

  // Checks names (unique, and plain: no '.', '/' or whitespace, as they name checkpoint files),
  // factories and loss, and that tied members name "<segment>.<parameter>" of existing segments.
  // Parameter existence is checked at build time.
  Status Validate() const;
};

// Builds segment `index` with the global RNG seeded from (seed, index).
std::shared_ptr<Segment> BuildSegment(const ModelSpec& spec, int index, uint64_t seed);

// Splits "segment.param.path" into the segment name and the parameter path inside it.
std::pair<std::string, std::string> SplitQualifiedName(const std::string& qualified);

// The modules of `segment` whose results depend on the other samples of their micro-batch:
// BatchNorm (and any module keeping running statistics: a `running_mean` or
// `num_batches_tracked` buffer), as "<path> (<kind>)"; empty when there are none.
std::vector<std::string> MicroBatchDependentModules(const Segment& segment);

// OK unless the spec declares micro_batch_independent and segment `index` (as built) holds a
// module that MicroBatchDependentModules names; the error names it and the fix.
Status CheckMicroBatchIndependence(const ModelSpec& spec, int index, const Segment& segment);

// Parameter count of every segment. Builds each segment once, one at a time, and frees it:
// only the `params` partition method needs this, and only at start-up.
std::vector<int64_t> CountSegmentParameters(const ModelSpec& spec);

// The partition of `spec`'s segments into `num_stages` stages by `method` (MakePartition),
// counting the segments' parameters only when the method needs them.
Result<Partition> PartitionModel(const ModelSpec& spec, const PartitionMethod& method,
                                 int num_stages);

}  // namespace mitra::cutpoint
