// KernelTrace: the kernels a GPU ran during the traced step, from LibTorch's profiler (Kineto),
// written as a chrome trace beside the step's own (`--trace FILE` on a GPU also writes
// FILE.kernels.json): which kernels the step ran and how long each took on the device. The
// step trace says how long a forward took; this says which kernels made it so.
#pragma once

#include <memory>
#include <string>

#include "mitra/common/status.h"

namespace mitra::worker {

class KernelTrace {
 public:
  // Starts recording the device's kernels (and the operators that launched them) now, in this
  // process. Fails, recording nothing, where this LibTorch cannot write a trace (no Kineto:
  // Debian's CPU build) or another profiler is already on. Blocks for as long as the profiler
  // takes to start (milliseconds; the first time in a process it also records and saves a
  // trace of nothing to find out whether it can, and CUPTI initialises: up to a second).
  static Result<std::unique_ptr<KernelTrace>> Start();

  // Stops recording and writes the chrome trace to `path`. Call once.
  Status Write(const std::string& path);

  ~KernelTrace();  // stops recording if Write was not called

 private:
  KernelTrace() = default;
  bool on_ = false;
};

}  // namespace mitra::worker
