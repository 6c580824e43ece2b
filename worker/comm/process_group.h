// The collective backend seam: the one place that knows which c10d classes implement mitra's
// collectives and point-to-point messages, and how they are put together in the LibTorch at hand.
//
// Gloo is the backend of the CPU build. NCCL (CUDA tensors between GPUs) is compiled only with
// -DMITRA_WITH_NCCL=ON against a CUDA LibTorch 2.x (scripts/gpu-build); elsewhere ParseBackend
// (mitra/worker/backend.h) refuses "nccl" saying so. The rest of the runtime only sees
// c10d::ProcessGroup.
//
// LibTorch 1.13: ProcessGroupGloo is itself a ProcessGroup. LibTorch 2.x: Gloo and NCCL are
// c10d::Backend implementations that a ProcessGroup dispatches to by the tensors' device; an
// NCCL group also carries a Gloo backend for CPU tensors (the step's control all-reduce, the
// activation headers), so one group serves both.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mitra/worker/backend.h"

namespace mitra::worker {

struct GroupOptions {
  Backend backend = Backend::kGloo;
  std::string host = "127.0.0.1";       // address to bind (Gloo)
  std::chrono::milliseconds timeout{30000};
};

// Creates a process group of `size` ranks over `store`; blocks until every member has joined or
// the timeout passes (then throws c10::Error). NCCL creates its communicator on first use, so
// for it the first collective may be the one that times out. Thread-compatible; call from one
// thread.
c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupOptions& options);

}  // namespace mitra::worker
