#include "worker/stage.h"

namespace mitra::worker {

Stage::Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition, int stage,
             uint64_t seed)
    : index_(stage), first_(partition.FirstSegment(stage)), end_(partition.EndSegment(stage)) {
  for (int i = first_; i < end_; ++i) {
    segments_.push_back(cutpoint::BuildSegment(spec, i, seed));
    for (const auto& item : segments_.back()->named_parameters(/*recurse=*/true)) {
      parameters_.push_back({spec.segments[i].name + "." + item.key(), item.value()});
    }
  }
}

cutpoint::Activations Stage::Forward(const cutpoint::Activations& inputs) {
  cutpoint::Activations acts = inputs;
  for (auto& segment : segments_) acts = segment->Forward(acts);
  return acts;
}

torch::Tensor Stage::Find(const std::string& qualified_name) const {
  for (const auto& p : parameters_) {
    if (p.name == qualified_name) return p.tensor;
  }
  return {};
}

int64_t Stage::ParameterCount() const {
  int64_t n = 0;
  for (const auto& p : parameters_) n += p.tensor.numel();
  return n;
}

}  // namespace mitra::worker
