// Precision and device: how a stage computes (fp32, or autocast to bf16 or fp16) and where
// (CPU, or the local rank's GPU).
//
// Mixed precision keeps fp32 master weights and optimizer state: parameters stay fp32 and
// autocast casts per operation inside the forward (matrix products to the low dtype, reductions
// and losses in fp32). The backward runs outside autocast, as PyTorch recommends; its operations
// take the dtypes the forward chose. fp16 also needs a loss scale (mitra/worker/loss_scaler.h).
//
// On this LibTorch 1.13 CPU build, CPU autocast supports bf16 only ("AutocastCPU only support
// Bfloat16"), and CUDA is absent: fp16 and `cuda` are refused with what to do instead.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "mitra/common/status.h"
#include "mitra/contract/precision.h"

namespace mitra::worker {

// The names, parsed and spelled once for the manager and the worker (mitra/contract/precision.h).
using contract::DeviceKind;
using contract::DeviceKindName;
using contract::ParseDeviceKind;
using contract::ParsePrecision;
using contract::Precision;
using contract::PrecisionName;

// Whether a stage on `device` can compute in `precision`: fp16 is refused on the CPU (LibTorch
// has no fp16 CPU autocast), saying to use bf16.
Status CheckPrecisionOn(Precision precision, c10::DeviceType device);

// The device a stage of `local_rank` computes on: the CPU, or for kCuda the GPU of
// `local_rank` among the visible ones (CUDA_VISIBLE_DEVICES is the CUDA runtime's business).
// cuda is refused on a build without CUDA, or when the machine has fewer GPUs than local
// ranks, with what to do; `share_gpus` instead gives local rank r the GPU r mod GPUs (ranks that
// share a GPU share its memory and compute: for tests and small models on a one-GPU machine).
Result<c10::Device> LocalDevice(DeviceKind device, int local_rank, bool share_gpus = false);

// NCCL runs one rank of a communicator per GPU: shared GPUs put local rank r >= `gpus` on the
// GPU of local rank r - `gpus`, which NCCL refuses at the first collective ("invalid usage",
// an abort). InvalidArgument for such a rank, saying what to do instead; Ok otherwise.
Status CheckNcclGpuSharing(int local_rank, int64_t gpus);

// Autocast for one forward, as an RAII scope: enters on construction and restores the previous
// autocast state on destruction (nests like Python's torch.autocast). Does nothing, and costs a
// branch, for fp32. Thread-local, like autocast itself.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace mitra::worker
