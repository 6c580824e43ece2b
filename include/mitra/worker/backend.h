// Backend: which collective library carries a job's messages (worker/comm/process_group.h builds
// the process groups). Gloo is the CPU build's; NCCL moves CUDA tensors between GPUs and is compiled
// only with -DMITRA_WITH_NCCL=ON against a CUDA LibTorch 2.x (scripts/gpu-build).
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra::worker {

enum class Backend { kGloo, kNccl };

// "gloo" | "nccl"; "nccl" is refused by a build without MITRA_WITH_NCCL, saying how to get one.
// InvalidArgument "unknown backend 'mpi' (expected gloo or nccl)" for anything else.
Result<Backend> ParseBackend(const std::string& name);
const char* BackendName(Backend backend);

}  // namespace mitra::worker
