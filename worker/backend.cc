#include "worker/backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef MITRA_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mitra::worker {

Result<Backend> ParseBackend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") {
#ifdef MITRA_WITH_NCCL
    return Backend::kNccl;
#else
    return Status::InvalidArgument("backend 'nccl' needs a build of mitra with CUDA-enabled "
                                   "LibTorch (MITRA_WITH_NCCL); this build has gloo only");
#endif
  }
  return Status::InvalidArgument("unknown backend '" + name + "' (expected gloo or nccl)");
}

c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupOptions& options) {
#ifdef MITRA_WITH_NCCL
  if (options.backend == Backend::kNccl) {
    auto nccl = c10d::ProcessGroupNCCL::Options::create();
    nccl->timeout = options.timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, nccl);
  }
#endif
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
  gloo->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo);
}

}  // namespace mitra::worker
