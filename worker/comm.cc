#include "worker/comm.h"

#include <functional>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/duration_text.h"
#include "common/free_port.h"

namespace mitra::worker {
namespace {

// Header of an activation message: a fixed-size int64 tensor, so the receiver can post its
// receive before knowing anything. Layout: count, then per tensor: name length, name bytes,
// dtype, ndim, dims.
constexpr int64_t kHeaderWords = 512;
constexpr int kTagsPerMessage = 64;  // header + up to 63 tensors

torch::Tensor EncodeHeader(const cutpoint::Activations& acts) {
  std::vector<int64_t> words{static_cast<int64_t>(acts.size())};
  for (const auto& [name, t] : acts) {
    words.push_back(static_cast<int64_t>(name.size()));
    for (unsigned char c : name) words.push_back(c);
    words.push_back(static_cast<int64_t>(t.scalar_type()));
    words.push_back(t.dim());
    for (int64_t d : t.sizes()) words.push_back(d);
  }
  TORCH_CHECK(static_cast<int64_t>(words.size()) <= kHeaderWords && acts.size() < kTagsPerMessage,
              "activations too large to describe in one header (", acts.size(),
              " tensors): use fewer or shorter-named activations");
  auto header = torch::zeros({kHeaderWords}, torch::kInt64);
  std::copy(words.begin(), words.end(), header.data_ptr<int64_t>());
  return header;
}

// `options`: the device (and nothing else) the receiver allocates the tensors on.
cutpoint::Activations DecodeHeader(const torch::Tensor& header, torch::TensorOptions options) {
  const int64_t* w = header.data_ptr<int64_t>();
  int64_t pos = 0;
  auto next = [&] {
    TORCH_CHECK(pos < kHeaderWords, "malformed activation header");
    return w[pos++];
  };
  cutpoint::Activations acts;
  for (int64_t n = next(), i = 0; i < n; ++i) {
    std::string name;
    for (int64_t len = next(), k = 0; k < len; ++k) name += static_cast<char>(next());
    auto dtype = static_cast<torch::ScalarType>(next());
    std::vector<int64_t> dims(next());
    for (auto& d : dims) d = next();
    acts.emplace(name, torch::empty(dims, options.dtype(dtype)));
  }
  return acts;
}

// Runs `post` (a send or a receive posted on Gloo), turning a failure into a PeerError.
c10::intrusive_ptr<c10d::Work> Posted(
    const std::function<c10::intrusive_ptr<c10d::Work>()>& post, const std::string& what) {
  try {
    return post();
  } catch (const std::exception& e) {
    const std::string cause = e.what();
    throw PeerError(what + " failed: " + cause.substr(0, cause.find('\n')));
  }
}

}  // namespace

Comm::Comm(const Placement& placement, c10::Device device, Backend backend)
    : placement_(placement),
      timeout_(static_cast<int64_t>(placement.timeout_s * 1000)),
      device_(device),
      through_host_(!device.is_cpu() && backend == Backend::kGloo) {}

void Comm::CreateGroups(Backend backend) {
  GroupOptions group{backend, placement_.host, timeout_};
  global_ = CreateProcessGroup(c10::make_intrusive<c10d::PrefixStore>("global", store_),
                               placement_.rank, placement_.world_size(), group);
  if (placement_.num_replicas() > 1) {
    dp_ = CreateProcessGroup(
        c10::make_intrusive<c10d::PrefixStore>("dp-" + std::to_string(placement_.stage()), store_),
        placement_.replica(), placement_.num_replicas(), group);
  }
}

std::unique_ptr<Comm> Comm::Connect(const Placement& placement, Backend backend,
                                    c10::Device device) {
  std::unique_ptr<Comm> comm(new Comm(placement, device, backend));
  const int world = placement.world_size();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(placement.rdzv_port);
  opts.isServer = placement.rank == 0;
  opts.numWorkers = world;
  opts.waitWorkers = true;
  opts.timeout = comm->timeout_;
  if (!opts.isServer) {
    // Every rank of a regrouped generation is told its place at the same moment, so rank 0's
    // store is often not listening yet; c10d's client would then wait a whole second.
    (void)WaitUntilListening(placement.rdzv_host, placement.rdzv_port, placement.timeout_s);
  }
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(placement.rdzv_host, opts);
    comm->store_ = c10::make_intrusive<c10d::PrefixStore>(
        "gen-" + std::to_string(placement.generation), tcp);
    comm->CreateGroups(backend);
  } catch (const std::exception& e) {
    throw PeerError("rendezvous at " + placement.rdzv_host + ":" +
                    std::to_string(placement.rdzv_port) + " (generation " +
                    std::to_string(placement.generation) + ", " + std::to_string(world) +
                    " ranks) did not complete within " + SecondsText(placement.timeout_s) + " s" + ": " +
                    e.what());
  }
  return comm;
}

std::unique_ptr<Comm> Comm::Join(const Placement& placement,
                                 const c10::intrusive_ptr<c10d::Store>& store, Backend backend,
                                 c10::Device device) {
  std::unique_ptr<Comm> comm(new Comm(placement, device, backend));
  comm->store_ = store;
  try {
    comm->CreateGroups(backend);
  } catch (const std::exception& e) {
    throw PeerError("the process groups of " + std::to_string(placement.world_size()) +
                    " ranks were not complete within " + SecondsText(placement.timeout_s) +
                    " s: " + e.what());
  }
  return comm;
}

Comm::~Comm() {
  // Outstanding sends must not outlive the buffers; a failed peer makes them throw, which a
  // destructor must swallow.
  for (auto& p : pending_) {
    try {
      p.work->wait(timeout_);
    } catch (...) {
    }
  }
}

std::string Comm::Describe(int rank) const {
  auto pos = placement_.stage_map.PositionOf(rank);
  return "rank " + std::to_string(rank) + " (stage " + std::to_string(pos.stage) + ", replica " +
         std::to_string(pos.replica) + ")";
}

void Comm::Wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  try {
    if (!work->wait(timeout_)) throw std::runtime_error("timed out");
  } catch (const std::exception& e) {
    std::string cause = e.what();
    cause = cause.substr(0, cause.find('\n'));  // c10::Error appends a backtrace
    throw PeerError(what + " failed (timeout " + SecondsText(placement_.timeout_s) + " s" + "): " + cause);
  }
}

void Comm::SendActivations(const cutpoint::Activations& acts, int dst, int tag) {
  std::vector<torch::Tensor> tensors{EncodeHeader(acts)};
  for (const auto& [name, t] : acts) tensors.push_back(t.detach().contiguous());
  SendTensors(tensors, dst, tag);
}

cutpoint::Activations Comm::RecvActivations(int src, int tag) {
  std::vector<torch::Tensor> header{torch::empty({kHeaderWords}, torch::kInt64)};
  Wait(PostRecv(header, src, tag * kTagsPerMessage),
       "receiving activations from " + Describe(src));
  auto acts = DecodeHeader(header[0], torch::TensorOptions().device(
                                          through_host_ ? c10::Device(c10::DeviceType::CPU) : device_));
  int index = 1;
  for (auto& [name, t] : acts) {
    std::vector<torch::Tensor> one{t};
    Wait(PostRecv(one, src, tag * kTagsPerMessage + index++),
         "receiving activation '" + name + "' from " + Describe(src));
    if (through_host_) t = t.to(device_);
  }
  return acts;
}

void Comm::SendTensors(const std::vector<torch::Tensor>& tensors, int dst, int tag) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<torch::Tensor> one{through_host_ ? tensors[i].to(torch::kCPU).contiguous()
                                                 : tensors[i].contiguous()};
    auto work = PostSend(one, dst, tag * kTagsPerMessage + static_cast<int>(i));
    pending_.push_back({work, std::move(one), dst});
  }
}

void Comm::RecvTensors(std::vector<torch::Tensor>& into, int src, int tag,
                       const std::string& what) {
  for (size_t i = 0; i < into.size(); ++i) {
    std::vector<torch::Tensor> one{through_host_ ? torch::empty_like(into[i], into[i].options().device(torch::kCPU))
                                                 : into[i]};
    Wait(PostRecv(one, src, tag * kTagsPerMessage + static_cast<int>(i)),
         "receiving " + what + " from " + Describe(src));
    if (through_host_) into[i].copy_(one[0]);
  }
}

c10::intrusive_ptr<c10d::Work> Comm::PostSend(std::vector<torch::Tensor>& tensors, int dst,
                                              int tag) {
  return Posted([&] { return global_->send(tensors, dst, tag); }, "sending to " + Describe(dst));
}

c10::intrusive_ptr<c10d::Work> Comm::PostRecv(std::vector<torch::Tensor>& tensors, int src,
                                              int tag) {
  return Posted([&] { return global_->recv(tensors, src, tag); },
                "receiving from " + Describe(src));
}

void Comm::WaitSends() {
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& p : pending) Wait(p.work, "sending to " + Describe(p.dst));
}

}  // namespace mitra::worker
