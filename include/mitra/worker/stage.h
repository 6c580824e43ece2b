// Stage: the segments one pipeline stage holds, and nothing else: one chunk of consecutive
// segments, or under a schedule with several chunks per rank (interleaved, zb-v) one range of
// consecutive segments per chunk, each a virtual stage of the partition (planner::ChunkLayout).
//
// Only the stage's own segments are ever constructed here (by their factories, seeded per
// segment), so its memory holds only its own parameters and buffers. Both are exposed in a
// stable order with qualified names "<segment>.<name>", identical on every replica.
//
// Forward() runs the segments in order and owns their randomness: each segment's forward draws
// from the default generator seeded by (seed, step, micro-batch, segment), so the same job makes
// the same random choices in every shape and schedule, and a recomputation repeats them. The
// generator's own state is put back afterwards: the program's draws outside segments go on as
// if no forward had run. Not thread-safe.
//
// A segment that draws random numbers (dropout) draws them for its whole micro-batch at once,
// so its draws depend on how the samples are grouped: such a model is not micro-batch
// independent, and keeping its micro-batch size for the job is what keeps its draws the same
// in every shape. A model that declares itself independent is checked, once per segment: a first
// training forward of a segment that moved the generator throws MicroBatchDependence.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mitra/cutpoint/model.h"
#include "mitra/cutpoint/partition.h"
#include "mitra/planner/schedule.h"

namespace mitra::worker {

struct HeldState;

// A model declared micro_batch_independent whose segment draws random numbers: bad input, with
// the fix in the message.
class MicroBatchDependence : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NamedTensor {
  std::string name;  // "<segment>.<name>"
  torch::Tensor tensor;
};

// Which forward this is: its random numbers are a function of it. `step` is the training step;
// evaluation passes use kEvalStep. `micro_batch` is the index in the step's global batch.
struct ForwardKey {
  static constexpr int64_t kEvalStep = -1;
  int64_t step = 0;
  int64_t micro_batch = 0;
};

class Stage {
 public:
  // Builds the stage's segments, except those `held` (may be null) holds as they were after
  // `held_step` steps: those it takes from there, as they are (worker/step/held_state.h), and those
  // it holds built with `seed` ahead of time: those it takes instead of building them again.
  Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition, int stage,
        uint64_t seed, HeldState* held = nullptr, int64_t held_step = -1);
  // The same with the chunks `layout` gives position `stage`; `partition` splits the model into
  // layout.num_virtual_stages() ranges.
  Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition,
        const planner::ChunkLayout& layout, int stage, uint64_t seed, HeldState* held = nullptr,
        int64_t held_step = -1);

  // Runs chunk `chunk`'s segments. Throws MicroBatchDependence (training mode, a model declared
  // micro-batch independent) when a segment's first training forward drew random numbers.
  cutpoint::Activations Forward(const cutpoint::Activations& inputs, const ForwardKey& key,
                                int chunk = 0);

  // Training or evaluation mode for every module of every segment (torch's train()/eval()).
  void SetTraining(bool training);
  bool training() const { return training_; }

  // Every chunk's, in chunk order.
  const std::vector<NamedTensor>& parameters() const { return parameters_; }
  // The parameters of chunk `chunk`'s segments.
  std::vector<torch::Tensor> ChunkParameters(int chunk) const;
  // The segment parameter i of parameters() belongs to.
  int SegmentOfParameter(size_t i) const { return parameter_segments_[i]; }
  const std::vector<NamedTensor>& buffers() const { return buffers_; }
  // The segment buffer i of buffers() belongs to.
  int SegmentOfBuffer(size_t i) const { return buffer_segments_[i]; }
  const std::vector<std::shared_ptr<cutpoint::Segment>>& segments() const { return segments_; }
  // The parameter with this qualified name, or an undefined tensor if this stage lacks it.
  torch::Tensor Find(const std::string& qualified_name) const;
  int64_t ParameterCount() const;

  // Copies of the buffers' values, and putting such copies back (a recomputation must leave
  // the buffers as the first forward left them).
  std::vector<torch::Tensor> CopyBuffers() const;
  void RestoreBuffers(const std::vector<torch::Tensor>& values);

  // Whether segment `segment` (of this stage) was taken from a HeldState rather than built.
  bool Adopted(int segment) const { return adopted_[IndexOf(segment)]; }

  int index() const { return index_; }  // the pipeline position
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  // The segments of chunk `chunk`: [first, end).
  std::pair<int, int> chunk_segments(int chunk) const { return chunks_[chunk]; }
  // Every segment the stage holds, in chunk order (as segments()).
  const std::vector<int>& segment_ids() const { return segment_ids_; }
  bool Holds(int segment) const { return IndexOf(segment) >= 0; }
  // Segment `segment`'s place in segment_ids() (and segments()); -1 when the stage lacks it.
  int IndexOf(int segment) const;

 private:
  int index_;
  std::vector<std::pair<int, int>> chunks_;
  std::vector<size_t> chunk_offsets_;  // by chunk: where its segments begin in segment_ids_
  std::vector<int> segment_ids_;
  uint64_t seed_;
  bool training_ = true;
  // By segment: its first training forward is still to be checked for random draws (the model
  // declares itself micro-batch independent).
  std::vector<bool> check_draws_;
  std::vector<std::string> names_;  // of the segments
  std::vector<std::shared_ptr<cutpoint::Segment>> segments_;
  std::vector<bool> adopted_;
  std::vector<NamedTensor> parameters_;
  std::vector<int> parameter_segments_;
  std::vector<int> buffer_segments_;  // by buffer
  std::vector<NamedTensor> buffers_;
};

// The seed of segment `segment`'s random numbers in the forward `key` of a job seeded `seed`.
uint64_t ForwardSeed(uint64_t seed, const ForwardKey& key, int segment);

}  // namespace mitra::worker
