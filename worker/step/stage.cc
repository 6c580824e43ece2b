#include "mitra/worker/stage.h"

#include <algorithm>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/torch.h>

#include "worker/step/held_state.h"

namespace mitra::worker {
namespace {

// SplitMix64's finaliser: neighbouring inputs give unrelated outputs.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Lends a device's default generator to the segments and gives it back as it was.
class BorrowedGenerator {
 public:
  explicit BorrowedGenerator(at::Device device)
      : gen_(at::globalContext().defaultGenerator(device)) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    saved_ = gen_.get_state();
  }
  ~BorrowedGenerator() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(saved_);
  }
  void Seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_current_seed(seed);
  }
  torch::Tensor State() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    return gen_.get_state();
  }

 private:
  at::Generator gen_;
  torch::Tensor saved_;
};

// The generators a forward on `device` draws from: the CPU's always (a segment may draw on
// the host), and the device's own, where dropout on its tensors draws. Each is seeded alike.
class ForwardGenerators {
 public:
  explicit ForwardGenerators(at::Device device) : cpu_(at::kCPU) {
    if (!device.is_cpu()) device_.emplace(device);
  }
  void Seed(uint64_t seed) {
    cpu_.Seed(seed);
    if (device_) device_->Seed(seed);
  }
  // Their states: a segment drew random numbers when they differ before and after its forward.
  std::vector<torch::Tensor> State() {
    std::vector<torch::Tensor> states{cpu_.State()};
    if (device_) states.push_back(device_->State());
    return states;
  }
  static bool Same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!torch::equal(a[i], b[i])) return false;
    }
    return true;
  }

 private:
  BorrowedGenerator cpu_;
  std::optional<BorrowedGenerator> device_;
};

}  // namespace

uint64_t ForwardSeed(uint64_t seed, const ForwardKey& key, int segment) {
  return Mix(Mix(Mix(Mix(seed) ^ static_cast<uint64_t>(key.step)) ^
                 static_cast<uint64_t>(key.micro_batch)) ^
             static_cast<uint64_t>(segment));
}

Stage::Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition, int stage,
             uint64_t seed, HeldState* held, int64_t held_step)
    : Stage(spec, partition, planner::ChunkLayout{partition.num_stages(), 1, false}, stage, seed,
            held, held_step) {}

Stage::Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition,
             const planner::ChunkLayout& layout, int stage, uint64_t seed, HeldState* held,
             int64_t held_step)
    : index_(stage), seed_(seed) {
  for (int c = 0; c < layout.chunks; ++c) {
    const int virtual_stage = layout.VirtualStage(stage, c);
    chunks_.emplace_back(partition.FirstSegment(virtual_stage), partition.EndSegment(virtual_stage));
    chunk_offsets_.push_back(segment_ids_.size());
    for (int i = chunks_.back().first; i < chunks_.back().second; ++i) segment_ids_.push_back(i);
  }
  check_draws_.assign(segment_ids_.size(), spec.micro_batch_independent);
  for (int i : segment_ids_) {
    names_.push_back(spec.segments[i].name);
    std::shared_ptr<cutpoint::Segment> segment = held ? held->Take(i, held_step) : nullptr;
    adopted_.push_back(segment != nullptr);
    if (!segment && held) segment = held->TakeBuilt(i, seed);
    segments_.push_back(segment ? std::move(segment) : cutpoint::BuildSegment(spec, i, seed));
    for (const auto& item : segments_.back()->named_parameters(/*recurse=*/true)) {
      parameters_.push_back({spec.segments[i].name + "." + item.key(), item.value()});
      parameter_segments_.push_back(i);
    }
    for (const auto& item : segments_.back()->named_buffers(/*recurse=*/true)) {
      if (!item.value().defined()) continue;  // e.g. BatchNorm without running statistics
      buffers_.push_back({spec.segments[i].name + "." + item.key(), item.value()});
      buffer_segments_.push_back(i);
    }
  }
}

int Stage::IndexOf(int segment) const {
  const auto it = std::find(segment_ids_.begin(), segment_ids_.end(), segment);
  return it == segment_ids_.end() ? -1 : static_cast<int>(it - segment_ids_.begin());
}

std::vector<torch::Tensor> Stage::ChunkParameters(int chunk) const {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const int segment = parameter_segments_[i];
    if (segment >= chunks_[chunk].first && segment < chunks_[chunk].second) {
      out.push_back(parameters_[i].tensor);
    }
  }
  return out;
}

cutpoint::Activations Stage::Forward(const cutpoint::Activations& inputs, const ForwardKey& key,
                                     int chunk) {
  // The stage's device: its parameters', else its inputs' (a stage of parameter-free segments).
  at::Device device(at::kCPU);
  if (!parameters_.empty()) {
    device = parameters_.front().tensor.device();
  } else if (!inputs.empty()) {
    device = inputs.begin()->second.device();
  }
  ForwardGenerators generator(device);
  cutpoint::Activations acts = inputs;
  size_t i = chunk_offsets_[chunk];  // the chunk's first segment in segments_
  for (int segment = chunks_[chunk].first; segment < chunks_[chunk].second; ++segment, ++i) {
    generator.Seed(ForwardSeed(seed_, key, segment));
    if (!check_draws_[i] || !training_) {
      acts = segments_[i]->Forward(acts);
      continue;
    }
    check_draws_[i] = false;
    const std::vector<torch::Tensor> seeded = generator.State();
    acts = segments_[i]->Forward(acts);
    if (!ForwardGenerators::Same(generator.State(), seeded)) {
      throw MicroBatchDependence(
          "segment '" + names_[i] + "' draws random numbers in training (dropout, say), for its "
          "whole micro-batch at once, so its draws depend on how samples are grouped; but the "
          "model declares micro_batch_independent: remove the declaration (then the micro-batch "
          "size is kept for the job, and every shape draws the same), or train without dropout");
    }
  }
  return acts;
}

void Stage::SetTraining(bool training) {
  for (auto& segment : segments_) segment->train(training);
  training_ = training;
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

std::vector<torch::Tensor> Stage::CopyBuffers() const {
  std::vector<torch::Tensor> out;
  out.reserve(buffers_.size());
  for (const auto& b : buffers_) out.push_back(b.tensor.detach().clone());
  return out;
}

void Stage::RestoreBuffers(const std::vector<torch::Tensor>& values) {
  // Through .data(), which shares the memory but not the version counter: autograd graphs of
  // micro-batches still in flight saved these buffers (BatchNorm saves its running statistics,
  // though training mode never reads them back), and a visible in-place write would make their
  // backward refuse to run.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].tensor.data().copy_(values[i]);
}

}  // namespace mitra::worker
