#include "worker/comm/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/version.h>

#ifdef MITRA_WITH_NCCL
#if TORCH_VERSION_MAJOR < 2
#error "MITRA_WITH_NCCL needs a CUDA LibTorch 2.x (scripts/gpu-build)"
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mitra::worker {
namespace {

c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    const GroupOptions& options) {
  auto gloo = c10d::ProcessGroupGloo::Options::create(options.timeout);
  gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(options.host));
  gloo->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, gloo);
}

#if TORCH_VERSION_MAJOR >= 2
// 2.x: a ProcessGroup is a front that dispatches each call, by the tensors' device, to the
// c10d::Backend registered for that device. Early 2.x fronts take an Options (the backend's
// name and timeout); later ones take none and are told their default backend. The overloads
// pick whichever constructor this LibTorch has (the int one wins when both would do).
template <typename Front = c10d::ProcessGroup>
auto MakeFront(int, const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               const GroupOptions&, c10d::ProcessGroup::BackendType type)
    -> decltype(Front(store, rank, size), c10::intrusive_ptr<Front>()) {
  auto front = c10::make_intrusive<Front>(store, rank, size);
  front->setDefaultBackend(type);
  return front;
}

template <typename Front = c10d::ProcessGroup>
c10::intrusive_ptr<Front> MakeFront(long, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                    int size, const GroupOptions& options,
                                    c10d::ProcessGroup::BackendType type) {
  auto front_options = c10::make_intrusive<typename Front::Options>(
      type == c10d::ProcessGroup::BackendType::NCCL ? "nccl" : "gloo", options.timeout);
  return c10::make_intrusive<Front>(store, rank, size, front_options);
}
#endif

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const GroupOptions& options) {
#if TORCH_VERSION_MAJOR < 2
  TORCH_CHECK(options.backend == Backend::kGloo, "only the gloo backend is built");
  return MakeGloo(store, rank, size, options);
#else
  using Type = c10d::ProcessGroup::BackendType;
  if (options.backend == Backend::kGloo) {
    auto front = MakeFront(0, store, rank, size, options, Type::GLOO);
    auto gloo = MakeGloo(store, rank, size, options);
    front->setBackend(c10::DeviceType::CPU, Type::GLOO, c10::intrusive_ptr<c10d::Backend>(gloo));
    front->setBackend(c10::DeviceType::CUDA, Type::GLOO, c10::intrusive_ptr<c10d::Backend>(gloo));  // Gloo stages CUDA tensors
    return front;
  }
#ifdef MITRA_WITH_NCCL
  // The two backends rendezvous under their own prefixes of the group's store.
  auto front = MakeFront(0, store, rank, size, options, Type::NCCL);
  auto gloo = MakeGloo(c10::make_intrusive<c10d::PrefixStore>("gloo", store), rank, size, options);
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.timeout;  // NCCL's own default is 10 minutes
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      c10::make_intrusive<c10d::PrefixStore>("nccl", store), rank, size, nccl_options);
  front->setBackend(c10::DeviceType::CPU, Type::GLOO, c10::intrusive_ptr<c10d::Backend>(gloo));
  front->setBackend(c10::DeviceType::CUDA, Type::NCCL, c10::intrusive_ptr<c10d::Backend>(nccl));
  return front;
#else
  TORCH_CHECK(false, "the nccl backend is not in this build (-DMITRA_WITH_NCCL=ON)");
#endif
#endif
}

}  // namespace mitra::worker
