// The collective backend seam: the one place that knows which c10d ProcessGroup implements
// mitra's collectives and point-to-point messages.
//
// Gloo is the backend of the CPU build and the only one built today. NCCL (GPUs) plugs in
// here, returning c10d::ProcessGroupNCCL for Backend::kNccl; the rest of the runtime only sees
// c10d::ProcessGroup. (It also needs the stage and its batches on the GPU, which the runtime
// does not do yet: ParseBackend refuses "nccl" with that explanation.)
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mitra/common/status.h"

namespace mitra::worker {

enum class Backend { kGloo, kNccl };

Result<Backend> ParseBackend(const std::string& name);  // "gloo" | "nccl"

struct GroupOptions {
  Backend backend = Backend::kGloo;
  std::string host = "127.0.0.1";       // address to bind (Gloo)
  std::chrono::milliseconds timeout{30000};
};

// Creates a process group of `size` ranks over `store`; blocks until every member has joined or
// the timeout passes (then throws c10::Error). Thread-compatible; call from one thread.
c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupOptions& options);

}  // namespace mitra::worker
