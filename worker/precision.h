// Precision and device: how a stage computes (fp32, or autocast to bf16 or fp16) and where
// (CPU, or the local rank's GPU).
//
// Mixed precision keeps fp32 master weights and optimizer state: parameters stay fp32 and
// autocast casts per operation inside the forward (matrix products to the low dtype, reductions
// and losses in fp32). The backward runs outside autocast, as PyTorch recommends; its operations
// take the dtypes the forward chose. fp16 also needs a loss scale (worker/loss_scaler.h).
//
// On this LibTorch 1.13 CPU build, CPU autocast supports bf16 only ("AutocastCPU only support
// Bfloat16"), and CUDA is absent: fp16 and `cuda` are refused with what to do instead.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "mitra/common/status.h"

namespace mitra::worker {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32" | "bf16" | "fp16"; refuses fp16 on the CPU (LibTorch has no fp16 CPU autocast).
Result<Precision> ParsePrecision(const std::string& name, c10::DeviceType device);
const char* PrecisionName(Precision precision);

// "cpu" | "cuda". `cuda` becomes the GPU of `local_rank` among the visible ones
// (CUDA_VISIBLE_DEVICES is the CUDA runtime's business); refused on a build without CUDA, or
// when the machine has fewer GPUs than local ranks, with what to do.
Result<c10::Device> ParseDevice(const std::string& name, int local_rank);

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
