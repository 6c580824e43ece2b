#include "worker/state/staging_pool.h"

#include "checkpoint/tensor_file.h"

namespace mitra::worker {

StagingPool& StagingPool::OfProcess() {
  static StagingPool* pool = new StagingPool();  // never destroyed: used until the process ends
  return *pool;
}

torch::Tensor StagingPool::Take(c10::IntArrayRef sizes, c10::ScalarType type) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find({sizes.vec(), type});
    if (it != kept_.end() && !it->second.empty()) {
      torch::Tensor buffer = std::move(it->second.back());
      it->second.pop_back();
      return buffer;
    }
  }
  return Allocate(sizes, type);
}

torch::Tensor StagingPool::Allocate(c10::IntArrayRef sizes, c10::ScalarType type) {
  // Page-aligned, so that the writer hands it to the disk without copying it.
  torch::Tensor buffer = checkpoint::EmptyAligned(sizes, type);
  std::lock_guard<std::mutex> lock(mu_);
  allocated_bytes_ += buffer.numel() * buffer.element_size();
  return buffer;
}

void StagingPool::Give(torch::Tensor buffer) {
  if (!buffer.defined()) return;
  std::lock_guard<std::mutex> lock(mu_);
  kept_[{buffer.sizes().vec(), buffer.scalar_type()}].push_back(std::move(buffer));
}

void StagingPool::Reserve(const std::vector<torch::Tensor>& like, int each) {
  std::map<Shape, int> wanted;
  for (const torch::Tensor& t : like) {
    if (t.dim() > 0) wanted[{t.sizes().vec(), t.scalar_type()}] += each;
  }
  torch::NoGradGuard no_grad;
  for (const auto& [shape, count] : wanted) {
    int missing = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      missing = count - static_cast<int>(kept_[shape].size());
    }
    // Zeroing writes every page now rather than in a save's copy.
    for (int i = 0; i < missing; ++i) Give(Allocate(shape.first, shape.second).zero_());
  }
}

void StagingPool::Clear() {
  std::map<Shape, std::vector<torch::Tensor>> freed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    freed.swap(kept_);
  }
}

int64_t StagingPool::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t bytes = 0;
  for (const auto& [shape, buffers] : kept_) {
    for (const torch::Tensor& b : buffers) bytes += b.numel() * b.element_size();
  }
  return bytes;
}

int64_t StagingPool::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_bytes_;
}

}  // namespace mitra::worker
