#include "worker/step/held_state.h"

#include <torch/torch.h>

namespace mitra::worker {

std::shared_ptr<cutpoint::Segment> HeldState::Take(int segment, int64_t at_step) {
  if (!Holds(segment, at_step)) return nullptr;
  return std::move(segments[segment - first_segment]);
}

std::shared_ptr<cutpoint::Segment> HeldState::TakeBuilt(int segment, uint64_t seed) {
  const auto it = built.find(segment);
  if (it == built.end() || seed != built_seed) return nullptr;
  std::shared_ptr<cutpoint::Segment> taken = std::move(it->second);
  built.erase(it);
  return taken;
}

bool HeldState::Whole() const {
  if (empty() || static_cast<int>(segments.size()) != end_segment - first_segment) return false;
  for (const auto& segment : segments) {
    if (!segment) return false;
  }
  return true;
}

int64_t HeldState::Bytes() const {
  int64_t bytes = 0;
  auto add = [&bytes](const torch::Tensor& t) {
    if (t.defined()) bytes += static_cast<int64_t>(t.numel() * t.element_size());
  };
  for (const auto& segment : segments) {
    if (!segment) continue;
    for (const auto& p : segment->parameters(/*recurse=*/true)) add(p);
    for (const auto& b : segment->buffers(/*recurse=*/true)) add(b);
  }
  for (const auto& [param, state] : optimizer_state) {
    for (const auto& [name, tensor] : state) add(tensor);
  }
  return bytes;
}

}  // namespace mitra::worker
