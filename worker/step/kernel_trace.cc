#include "worker/step/kernel_trace.h"

#include <set>

#include <torch/csrc/autograd/profiler_kineto.h>

namespace mitra::worker {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

const std::set<ActivityType>& Activities() {
  static const std::set<ActivityType> activities{ActivityType::CPU, ActivityType::CUDA};
  return activities;
}

const char kCannot[] = "LibTorch's profiler cannot record a kernel trace here: ";

// Turns the profiler on for the CPU's operators and the GPU's kernels.
Status Enable() {
  const ProfilerConfig config(ProfilerState::KINETO);
  try {
    profiler::prepareProfiler(config, Activities());
    profiler::enableProfiler(config, Activities());
  } catch (const c10::Error& e) {
    return Status::Unavailable(kCannot + std::string(e.what_without_backtrace()));
  }
  return Status::Ok();
}

// Whether this LibTorch can write a trace at all. Without Kineto (Debian's CPU build) the
// profiler starts and records, and only saving fails; so a short recording is saved once per
// process to /dev/null to find out.
const Status& CanWriteTraces() {
  static const Status can = []() -> Status {
    if (Status enabled = Enable(); !enabled.ok()) return enabled;
    try {
      profiler::disableProfiler()->save("/dev/null");
    } catch (const c10::Error& e) {
      return Status::Unavailable(kCannot + std::string(e.what_without_backtrace()));
    }
    return Status::Ok();
  }();
  return can;
}

}  // namespace

Result<std::unique_ptr<KernelTrace>> KernelTrace::Start() {
  if (!CanWriteTraces().ok()) return CanWriteTraces();
  if (Status enabled = Enable(); !enabled.ok()) return enabled;
  std::unique_ptr<KernelTrace> trace(new KernelTrace());
  trace->on_ = true;
  return trace;
}

Status KernelTrace::Write(const std::string& path) {
  if (!on_) return Status::Internal("the kernel trace was written already");
  on_ = false;
  try {
    std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
    result->save(path);
  } catch (const c10::Error& e) {
    return Status::IoError("cannot write the kernel trace " + path + ": " +
                           e.what_without_backtrace());
  }
  return Status::Ok();
}

KernelTrace::~KernelTrace() {
  if (!on_) return;
  try {
    profiler::disableProfiler();
  } catch (const c10::Error&) {
    // Already off: nothing to stop.
  }
}

}  // namespace mitra::worker
