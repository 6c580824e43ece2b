#include "worker/comm/comm.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include "common/duration_text.h"
#include "rendezvous/job_token.h"
#include "worker/comm/job_store.h"

namespace mitra::worker {
namespace {

// An activation message is a header, a fixed-size int64 tensor (so the receiver can post its
// receive before knowing anything), then its tensors, each on its own tag: tag * kTagsPerMessage
// + 1 + i, or, when the receiver posted them ahead (Comm::ExpectActivations), + kAheadTags + i.
// The header: whether the tensors go to the posted ones, the layout's length, then the layout:
// count, then per tensor: name length, name bytes, dtype, ndim, dims.
using Layout = std::vector<int64_t>;
constexpr int64_t kHeaderWords = 512;
constexpr int kAheadTags = 64;                   // header + up to 63 tensors below it
constexpr int kTagsPerMessage = 2 * kAheadTags;  // and the same 63 above it

int HeaderTag(int tag) { return tag * kTagsPerMessage; }
int TensorTag(int tag, bool ahead) { return tag * kTagsPerMessage + (ahead ? kAheadTags : 1); }

Layout LayoutOf(const cutpoint::Activations& acts) {
  Layout words{static_cast<int64_t>(acts.size())};
  for (const auto& [name, t] : acts) {
    words.push_back(static_cast<int64_t>(name.size()));
    for (unsigned char c : name) words.push_back(c);
    words.push_back(static_cast<int64_t>(t.scalar_type()));
    words.push_back(t.dim());
    for (int64_t d : t.sizes()) words.push_back(d);
  }
  TORCH_CHECK(static_cast<int64_t>(words.size()) + 2 <= kHeaderWords && acts.size() < kAheadTags,
              "activations too large to describe in one header (", acts.size(),
              " tensors): use fewer or shorter-named activations");
  return words;
}

torch::Tensor HeaderOf(const Layout& layout, bool ahead) {
  auto header = torch::zeros({kHeaderWords}, torch::kInt64);
  int64_t* w = header.data_ptr<int64_t>();
  w[0] = ahead ? 1 : 0;
  w[1] = static_cast<int64_t>(layout.size());
  std::copy(layout.begin(), layout.end(), w + 2);
  return header;
}

// The header's flag and layout.
std::pair<bool, Layout> ReadHeader(const torch::Tensor& header) {
  const int64_t* w = header.data_ptr<int64_t>();
  TORCH_CHECK(w[1] >= 0 && w[1] + 2 <= kHeaderWords, "malformed activation header");
  return {w[0] != 0, Layout(w + 2, w + 2 + w[1])};
}

struct Described {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> dims;
};

// The tensors `layout` describes, in the order of their names (a message's order).
std::vector<Described> Parse(const Layout& layout) {
  size_t pos = 0;
  auto next = [&] {
    TORCH_CHECK(pos < layout.size(), "malformed activation header");
    return layout[pos++];
  };
  const int64_t count = next();
  TORCH_CHECK(count >= 0 && count < kAheadTags, "malformed activation header");
  std::vector<Described> tensors(count);
  for (Described& d : tensors) {
    for (int64_t len = next(), k = 0; k < len; ++k) d.name += static_cast<char>(next());
    d.dtype = static_cast<torch::ScalarType>(next());
    d.dims.resize(next());
    for (auto& dim : d.dims) dim = next();
  }
  return tensors;
}

torch::Tensor Allocate(const Described& d, c10::Device device) {
  return torch::empty(d.dims, torch::TensorOptions().device(device).dtype(d.dtype));
}

// The job's store `store` is, or wraps in prefixes; null when it is another kind (the
// HashStore of ranks that are threads).
const JobStore* JobStoreBehind(c10::intrusive_ptr<c10d::Store> store) {
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get())) {
    store = prefixed->getUnderlyingStore();
  }
  return dynamic_cast<const JobStore*>(store.get());
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
      backend_(backend),
      timeout_(static_cast<int64_t>(placement.timeout_s * 1000)),
      device_(device),
      through_host_(!device.is_cpu() && backend == Backend::kGloo) {}

void Comm::CreateGroups(Backend backend, const JobStore* proof) {
  GroupOptions group{backend, placement_.host, timeout_};
  const bool prove = proof != nullptr && backend == Backend::kGloo;
  auto global_store = c10::make_intrusive<c10d::PrefixStore>("global", store_);
  global_ = CreateProcessGroup(global_store, placement_.rank, placement_.world_size(), group);
  if (prove) {
    ProvePairs(*global_, placement_.rank, placement_.world_size(), *global_store, *proof,
               "the global group");
  }
  if (placement_.num_replicas() > 1) {
    auto dp_store =
        c10::make_intrusive<c10d::PrefixStore>("dp-" + std::to_string(placement_.stage()), store_);
    dp_ = CreateProcessGroup(dp_store, placement_.replica(), placement_.num_replicas(), group);
    if (prove) {
      ProvePairs(*dp_, placement_.replica(), placement_.num_replicas(), *dp_store, *proof,
                 "the replicas of stage " + std::to_string(placement_.stage()));
    }
  }
}

c10d::ProcessGroup* Comm::ReductionGroup(const std::vector<int>& ranks) {
  if (dp_ && ranks == placement_.stage_map.RanksOfStage(placement_.stage())) return dp_.get();
  if (auto it = reduction_.find(ranks); it != reduction_.end()) return it->second.get();
  const auto me = std::find(ranks.begin(), ranks.end(), placement_.rank);
  TORCH_CHECK(me != ranks.end(), "rank ", placement_.rank, " is not in the reduction group");
  std::string members;  // "1-2"
  for (int r : ranks) members += (members.empty() ? "" : "-") + std::to_string(r);
  const std::string what = "the gradient group of ranks " + members;
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("reduce-" + members, store_);
    const int index = static_cast<int>(me - ranks.begin()), size = static_cast<int>(ranks.size());
    auto group = CreateProcessGroup(store, index, size, {backend_, placement_.host, timeout_});
    if (const JobStore* proof = JobStoreBehind(store_); proof && backend_ == Backend::kGloo) {
      ProvePairs(*group, index, size, *store, *proof, what);
    }
    return (reduction_[ranks] = group).get();
  } catch (const PeerError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerError(what + " was not complete within " + SecondsText(placement_.timeout_s) +
                    " s: " + e.what());
  }
}

void Comm::ProvePairs(c10d::ProcessGroup& group, int rank, int size, c10d::Store& store,
                      const JobStore& proof, const std::string& what) {
  constexpr int kProofTag = 0x7ffffff0;  // above every message tag (kTagsPerMessage * tag)
  constexpr int64_t kTagBytes = 32;
  if (size < 2) return;
  // The first rank to ask sets the group's nonce; every rank reads the same one.
  const rendezvous::Bytes32 fresh = rendezvous::RandomBytes32();
  const std::vector<uint8_t> set =
      store.compareSet("pair-nonce", {}, std::vector<uint8_t>(fresh.begin(), fresh.end()));
  const std::string nonce(set.begin(), set.end());
  std::vector<int> peers;
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) peers.push_back(peer);
  }
  std::vector<std::vector<torch::Tensor>> sent, received;
  sent.reserve(peers.size());  // the posted sends and receives hold on to their elements
  received.reserve(peers.size());
  std::vector<c10::intrusive_ptr<c10d::Work>> sends, receives;
  for (const int peer : peers) {
    rendezvous::Bytes32 tag = proof.PairTag(nonce, rank, peer);
    sent.push_back({torch::from_blob(tag.data(), {kTagBytes}, torch::kUInt8).clone()});
    received.push_back({torch::zeros({kTagBytes}, torch::kUInt8)});
    const std::string where = "proving " + what + "'s connection to its rank " + std::to_string(peer);
    sends.push_back(Posted([&] { return group.send(sent.back(), peer, kProofTag); }, where));
    receives.push_back(Posted([&] { return group.recv(received.back(), peer, kProofTag); }, where));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    const std::string where = what + "'s connection to its rank " + std::to_string(peers[i]);
    Wait(receives[i], "receiving the job token's proof over " + where);
    // Its own proof out before judging the peer's: a rank that refused closes its connections,
    // and the peer should learn why (its tag was refused) rather than that a connection closed.
    Wait(sends[i], "sending the job token's proof over " + where);
    rendezvous::Bytes32 got;
    std::memcpy(got.data(), received[i][0].data_ptr(), got.size());
    if (!rendezvous::SameTag(got, proof.PairTag(nonce, peers[i], rank))) {
      throw PeerError(where + " did not prove the job token: another process took its place");
    }
  }
}

std::unique_ptr<Comm> Comm::Connect(const Placement& placement, Backend backend,
                                    c10::Device device) {
  std::unique_ptr<Comm> comm(new Comm(placement, device, backend));
  const int world = placement.world_size();
  try {
    // Rank 0 hosts the job's store; every rank (rank 0 too) connects to it with the job token.
    // A rank told its place before rank 0 listens tries again every few milliseconds.
    auto store = JobStore::Connect(placement, /*host=*/placement.rank == 0);
    comm->store_ = c10::make_intrusive<c10d::PrefixStore>(
        "gen-" + std::to_string(placement.generation), store);
    comm->CreateGroups(backend, store.get());
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
    comm->CreateGroups(backend, JobStoreBehind(store));
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

void Comm::Send(torch::Tensor tensor, int dst, int full_tag) {
  std::vector<torch::Tensor> one{through_host_ ? tensor.to(torch::kCPU).contiguous()
                                               : tensor.contiguous()};
  auto work = PostSend(one, dst, full_tag);
  pending_.push_back({work, std::move(one), dst});
}

std::vector<c10::intrusive_ptr<c10d::Work>> Comm::PostRecvs(
    const std::vector<torch::Tensor>& tensors, int src, int first_tag) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<torch::Tensor> one{tensors[i]};
    works.push_back(PostRecv(one, src, first_tag + static_cast<int>(i)));
  }
  return works;
}

void Comm::SendActivations(const cutpoint::Activations& acts, int dst, int tag) {
  const Layout layout = LayoutOf(acts);
  const auto key = std::make_pair(dst, tag);
  const auto last = sent_layouts_.find(key);
  const bool posted = last != sent_layouts_.end();  // the receiver posted tensors like `last`
  const bool ahead = posted && last->second == layout;
  Send(HeaderOf(layout, ahead), dst, HeaderTag(tag));
  if (posted && !ahead) {
    int i = 0;
    for (const Described& d : Parse(last->second)) {
      Send(Allocate(d, torch::kCPU).zero_(), dst, TensorTag(tag, /*ahead=*/true) + i++);
    }
  }
  int i = 0;
  for (const auto& [name, t] : acts) Send(t.detach(), dst, TensorTag(tag, ahead) + i++);
  sent_layouts_[key] = layout;
}

void Comm::ExpectActivations(int src, int tag) {
  const auto key = std::make_pair(src, tag);
  if (expected_.count(key)) return;
  Expected e;
  e.header = {torch::empty({kHeaderWords}, torch::kInt64)};
  e.header_work = PostRecv(e.header, src, HeaderTag(tag));
  const auto last = received_layouts_.find(key);
  if (last != received_layouts_.end()) {
    for (const Described& d : Parse(last->second)) {
      e.tensors.push_back(Allocate(d, through_host_ ? torch::kCPU : device_));
    }
    e.works = PostRecvs(e.tensors, src, TensorTag(tag, /*ahead=*/true));
  }
  expected_.emplace(key, std::move(e));
}

cutpoint::Activations Comm::RecvActivations(int src, int tag) {
  const auto key = std::make_pair(src, tag);
  ExpectActivations(src, tag);
  Expected e = std::move(expected_.at(key));
  expected_.erase(key);
  Wait(e.header_work, "receiving activations from " + Describe(src));
  const auto [ahead, layout] = ReadHeader(e.header[0]);
  for (size_t i = 0; !ahead && i < e.works.size(); ++i) {
    Wait(e.works[i], "receiving activations from " + Describe(src));  // the sender's filler
  }
  const std::vector<Described> described = Parse(layout);
  TORCH_CHECK(!ahead || e.tensors.size() == described.size(), "activations from ",
              Describe(src), " were sent into receives not posted");
  cutpoint::Activations acts;
  for (size_t i = 0; i < described.size(); ++i) {
    const std::string what = "receiving activation '" + described[i].name + "' from " + Describe(src);
    torch::Tensor t;
    if (ahead) {
      Wait(e.works[i], what);
      t = e.tensors[i];
    } else {
      std::vector<torch::Tensor> one{Allocate(described[i], through_host_ ? torch::kCPU : device_)};
      Wait(PostRecv(one, src, TensorTag(tag, /*ahead=*/false) + static_cast<int>(i)), what);
      t = one[0];
    }
    acts.emplace(described[i].name, through_host_ ? t.to(device_) : t);
  }
  received_layouts_[key] = layout;
  return acts;
}

void Comm::SendTensors(const std::vector<torch::Tensor>& tensors, int dst, int tag) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    Send(tensors[i], dst, tag * kTagsPerMessage + static_cast<int>(i));
  }
}

void Comm::ExpectTensors(const std::vector<torch::Tensor>& like, int src, int tag) {
  const auto key = std::make_pair(src, tag);
  if (expected_.count(key)) return;
  Expected e;
  for (const torch::Tensor& t : like) {
    e.tensors.push_back(
        torch::empty(t.sizes(), t.options().device(through_host_ ? torch::kCPU : device_)));
  }
  e.works = PostRecvs(e.tensors, src, tag * kTagsPerMessage);
  expected_.emplace(key, std::move(e));
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

std::vector<torch::Tensor> Comm::TakeTensors(int src, int tag, const std::string& what) {
  const auto it = expected_.find(std::make_pair(src, tag));
  TORCH_CHECK(it != expected_.end(), "taking ", what, " from ", Describe(src),
              " that no ExpectTensors posted");
  Expected e = std::move(it->second);
  expected_.erase(it);
  for (size_t i = 0; i < e.tensors.size(); ++i) {
    Wait(e.works[i], "receiving " + what + " from " + Describe(src));
    if (through_host_) e.tensors[i] = e.tensors[i].to(device_);
  }
  return std::move(e.tensors);
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
