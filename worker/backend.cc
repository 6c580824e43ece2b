#include "worker/backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace mitra::worker {

Result<Backend> ParseBackend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") {
    return Status::InvalidArgument("backend 'nccl' is not in this build: it needs CUDA-enabled "
                                   "LibTorch and GPU placement of stages; use gloo");
  }
  return Status::InvalidArgument("unknown backend '" + name + "' (expected gloo or nccl)");
}

c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupOptions& options) {
  TORCH_CHECK(options.backend == Backend::kGloo, "only the gloo backend is built");
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
  gloo->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo);
}

}  // namespace mitra::worker
