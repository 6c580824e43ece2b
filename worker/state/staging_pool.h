// StagingPool: the checkpoint staging memory a worker process keeps between its checkpointers.
//
// An asynchronous save copies the parameters and optimizer state into page-aligned staging
// buffers (worker/state/checkpointer.h). Copying into new memory faults every page in first,
// which on a small virtual machine costs a good part of a second per 300 MB, taken from the training
// steps that run beside the copy. A checkpointer lives for one generation of the job, and the
// save right after a morph is its first: without the pool, every morph paid that again. So
// a checkpointer takes its buffers from the process's pool and gives them back when it ends;
// a standby worker (started ahead of a grow) fills the pool for its stage while it waits.
//
// Thread-safe: the training thread, the checkpointer's writer thread and a standby use it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace mitra::worker {

class StagingPool {
 public:
  // The pool of this process.
  static StagingPool& OfProcess();

  // A page-aligned buffer of that shape and type: a kept one when there is one (its pages are
  // in memory), else a new one (its pages fault in as they are first written). Never blocks
  // beyond the allocation.
  torch::Tensor Take(c10::IntArrayRef sizes, c10::ScalarType type);
  // Keeps `buffer` (page-aligned, as Take gives them) for a later Take.
  void Give(torch::Tensor buffer);
  // Makes the pool hold at least `each` buffers for every tensor of `like` (of its shape and
  // type; a shape that recurs counts as often), writing every page of those it adds: blocks
  // for as long as that takes. Scalars are left out (a save copies them at once).
  void Reserve(const std::vector<torch::Tensor>& like, int each);
  // Frees every kept buffer: what the checkpointer of this generation did not take, it will
  // not need.
  void Clear();
  // The bytes of the kept buffers.
  int64_t kept_bytes() const;
  // The bytes of every buffer Take and Reserve allocated in this process: memory that a copy
  // into it, or the zeroing, faulted in.
  int64_t allocated_bytes() const;

 private:
  using Shape = std::pair<std::vector<int64_t>, c10::ScalarType>;
  torch::Tensor Allocate(c10::IntArrayRef sizes, c10::ScalarType type);

  mutable std::mutex mu_;
  std::map<Shape, std::vector<torch::Tensor>> kept_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace mitra::worker
