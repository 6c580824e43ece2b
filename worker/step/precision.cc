#include "worker/step/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

// LibTorch 2.4 made autocast's switches take the device type; before, each device had its own.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define MITRA_AUTOCAST_BY_DEVICE 1
#else
#define MITRA_AUTOCAST_BY_DEVICE 0
#endif

namespace mitra::worker {
namespace {

bool AutocastEnabled(c10::DeviceType device) {
#if MITRA_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                         : at::autocast::is_cpu_enabled();
#endif
}

void SetAutocastEnabled(c10::DeviceType device, bool enabled) {
#if MITRA_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

c10::ScalarType AutocastDtype(c10::DeviceType device) {
#if MITRA_AUTOCAST_BY_DEVICE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void SetAutocastDtype(c10::DeviceType device, c10::ScalarType dtype) {
#if MITRA_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

Status CheckPrecisionOn(Precision precision, c10::DeviceType device) {
  if (precision == Precision::kFp16 && device != c10::DeviceType::CUDA) {
    return Status::InvalidArgument(
        "precision 'fp16' needs a GPU (--device cuda): LibTorch's CPU autocast supports only "
        "bf16; use --precision bf16 on the CPU");
  }
  return Status::Ok();
}

Result<c10::Device> LocalDevice(DeviceKind device, int local_rank, bool share_gpus) {
  if (device == DeviceKind::kCpu) return c10::Device(c10::DeviceType::CPU);
  if (!torch::cuda::is_available()) {
    return Status::InvalidArgument(
        "device 'cuda' is not available: this program is built against a LibTorch without "
        "CUDA (or the machine has no visible GPU); build on the GPU machine with "
        "scripts/gpu-build, or use --device cpu");
  }
  const int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (share_gpus) {
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  }
  if (local_rank >= gpus) {
    return Status::InvalidArgument(
        "local rank " + std::to_string(local_rank) + " has no GPU of its own (" +
        std::to_string(gpus) + " visible): give the machine slots=" + std::to_string(gpus) +
        " or fewer in the machine list, or let ranks share GPUs (--share-gpus)");
  }
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local_rank));
}

Status CheckNcclGpuSharing(int local_rank, int64_t gpus) {
  if (gpus <= 0 || local_rank < gpus) return Status::Ok();
  const int64_t gpu = local_rank % gpus;
  return Status::InvalidArgument(
      "backend 'nccl' runs one rank per GPU, and local rank " + std::to_string(local_rank) +
      " would share GPU " + std::to_string(gpu) + " with local rank " +
      std::to_string(local_rank - gpus) + " (--share-gpus, " + std::to_string(gpus) +
      " visible): give the machine slots=" + std::to_string(gpus) + " or fewer in the machine "
      "list, or use --backend gloo to let ranks share GPUs");
}

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) {
  if (precision == Precision::kFp32) return;
  active_ = true;
  device_ = device;
  was_enabled_ = AutocastEnabled(device);
  previous_dtype_ = AutocastDtype(device);
  SetAutocastEnabled(device, true);
  SetAutocastDtype(device, precision == Precision::kBf16 ? c10::ScalarType::BFloat16
                                                          : c10::ScalarType::Half);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The casts of the weights are cached while any autocast scope is open; the outermost one
  // drops them, so that the next step casts the updated weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(device_, was_enabled_);
  SetAutocastDtype(device_, previous_dtype_);
}

}  // namespace mitra::worker
