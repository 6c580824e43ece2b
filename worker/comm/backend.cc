#include "mitra/worker/backend.h"

namespace mitra::worker {

Result<Backend> ParseBackend(const std::string& name) {
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") {
#ifdef MITRA_WITH_NCCL
    return Backend::kNccl;
#else
    return Status::InvalidArgument(
        "backend 'nccl' is not in this build: it needs a CUDA LibTorch and -DMITRA_WITH_NCCL=ON "
        "(on a GPU machine, build with scripts/gpu-build); use --backend gloo");
#endif
  }
  return Status::InvalidArgument("unknown backend '" + name + "' (expected gloo or nccl)");
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kGloo: return "gloo";
    case Backend::kNccl: return "nccl";
  }
  return "?";
}

}  // namespace mitra::worker
