// Comm: the process groups of one worker and the messages between pipeline stages.
//
// Connect() rendezvouses through the job's store (worker/comm/job_store.h; rank 0 hosts it, every
// connection proves the job token) under a prefix of the
// generation, so a relaunched job never meets the keys of an earlier one, and then Join()s:
// creates the global group (all ranks) and the data-parallel group of this rank's stage (its
// replicas) over that store.
//
// Every wait has the placement's timeout. A peer that dies or stops answering turns into a
// PeerError that names the operation and the peer, instead of a hang or a bare Gloo message.
// Not thread-safe: one Comm is used by the worker's training thread only.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "mitra/cutpoint/activations.h"
#include "mitra/worker/placement.h"
#include "worker/comm/process_group.h"

namespace mitra::worker {

class JobStore;

// A collective or message failed because a peer is gone or timed out.
class PeerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Comm {
 public:
  // Blocks until every rank of the job has joined (or the placement's timeout passes: throws
  // PeerError saying which ranks are missing is not knowable, so it says how many joined).
  // `device`: where the stage's tensors live. Received activations are allocated there; with
  // Gloo and a CUDA stage, messages pass through host memory (Gloo moves host memory only).
  static std::unique_ptr<Comm> Connect(const Placement& placement, Backend backend,
                                       c10::Device device = c10::Device(c10::DeviceType::CPU));
  // What Connect does once the store is there: creates this rank's groups over `store`, which
  // every rank of the placement's job shares (a c10d::HashStore for ranks that are threads of
  // one process), proving their connections when it is a JobStore. Blocks like Connect;
  // throws PeerError when the groups are not complete in time.
  static std::unique_ptr<Comm> Join(const Placement& placement,
                                    const c10::intrusive_ptr<c10d::Store>& store, Backend backend,
                                    c10::Device device = c10::Device(c10::DeviceType::CPU));

  ~Comm();

  c10d::ProcessGroup& global() { return *global_; }
  // The replicas of this rank's stage; null when there is one replica.
  c10d::ProcessGroup* data_parallel() { return dp_.get(); }
  // The group of `ranks` (the holder in each replica, by replica; this rank one of them) that
  // reduces the gradients of the segments they hold alike when each pipeline has its own
  // partition (worker/step/pipeline_partitions.h): the stage's data-parallel group when `ranks`
  // are its replicas, else one made now and kept. Every member calls it, and each rank for its
  // groups in one order that all ranks share (PipelinePartitions::GroupsOf). Blocks until every
  // member has joined; PeerError when the timeout passes first.
  c10d::ProcessGroup* ReductionGroup(const std::vector<int>& ranks);

  // Sends named tensors to `dst` (asynchronous: the tensors are kept alive until WaitSends).
  // The receiver learns names, dtypes and shapes from a small header message.
  void SendActivations(const cutpoint::Activations& acts, int dst, int tag);
  cutpoint::Activations RecvActivations(int src, int tag);

  // Tensors whose shapes both sides already know (gradients of sent activations).
  void SendTensors(const std::vector<torch::Tensor>& tensors, int dst, int tag);
  // `what` names the tensors in error messages ("gradients of micro-batch 3").
  void RecvTensors(std::vector<torch::Tensor>& into, int src, int tag, const std::string& what);

  // Receives posted ahead of the call that takes their message. Gloo moves a message once both
  // sides have posted it: when the receive came first, at once from the sender's own send;
  // otherwise only after the sender's process notices the receive, which takes milliseconds
  // while it computes on shared cores. Each does nothing when a receive on (src, tag) is posted
  // already and not yet taken; each throws PeerError like the receive itself.
  //
  // The next RecvActivations(src, tag): posts its header and, once a message on (src, tag) has
  // arrived, tensors shaped as that one's. The sender keeps the same record of what it sent on
  // (dst, tag), so it knows what the receiver posted: its tensors go into them when their
  // shapes are unchanged (a step's messages are the previous step's), and when they changed it
  // fills them and sends as without this (the header says which).
  void ExpectActivations(int src, int tag);
  // The next message of tensors shaped as `like` on (src, tag), which TakeTensors takes.
  void ExpectTensors(const std::vector<torch::Tensor>& like, int src, int tag);
  // Waits for the message ExpectTensors posted on (src, tag) and returns its tensors (on the
  // stage's device). `what` names them in errors. Throws PeerError like RecvTensors, and
  // c10::Error when nothing was posted on (src, tag).
  std::vector<torch::Tensor> TakeTensors(int src, int tag, const std::string& what);

  // Waits for every outstanding send.
  void WaitSends();

  // A point-to-point send or receive of `tensors` on the global group. Gloo writes to (or
  // registers with) the peer's connection at once, so a peer already gone fails here rather
  // than at the wait: that, too, throws PeerError.
  c10::intrusive_ptr<c10d::Work> PostSend(std::vector<torch::Tensor>& tensors, int dst, int tag);
  c10::intrusive_ptr<c10d::Work> PostRecv(std::vector<torch::Tensor>& tensors, int src, int tag);

  // Waits for `work`; on failure or timeout throws PeerError("<what>: <cause>").
  void Wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what);

  // "rank 3 (stage 1, replica 1)"
  std::string Describe(int rank) const;

 private:
  Comm(const Placement& placement, c10::Device device, Backend backend);
  // Creates the groups over store_ (throws what c10d throws). With `proof`, the job's store,
  // each Gloo group's connections are proven (ProvePairs) before the groups are used.
  void CreateGroups(Backend backend, const JobStore* proof = nullptr);
  // Gloo connects each pair of a group by accepting the first connection to a port of its
  // own, with no word on who connects: a process that took a pair's place would receive the
  // job's messages or send its own. So every rank sends every other rank of `group` a tag
  // only the job's processes can make (JobStore::PairTag, over a nonce fresh in `store`) and
  // checks the one it receives, before the group carries anything else. Throws PeerError
  // naming the pair whose tag was wrong or did not come.
  void ProvePairs(c10d::ProcessGroup& group, int rank, int size, c10d::Store& store,
                  const JobStore& proof, const std::string& what);

  Placement placement_;
  Backend backend_ = Backend::kGloo;
  std::chrono::milliseconds timeout_{30000};
  c10::Device device_{c10::DeviceType::CPU};
  bool through_host_ = false;  // a CUDA stage over Gloo: copy messages to and from the host
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> global_;
  c10::intrusive_ptr<c10d::ProcessGroup> dp_;
  std::map<std::vector<int>, c10::intrusive_ptr<c10d::ProcessGroup>> reduction_;  // by ranks
  struct PendingSend {
    c10::intrusive_ptr<c10d::Work> work;
    std::vector<torch::Tensor> keep_alive;
    int dst;
  };
  std::vector<PendingSend> pending_;
  // Receives posted ahead (ExpectActivations, ExpectTensors), by (src, tag).
  struct Expected {
    std::vector<torch::Tensor> header;  // activations only
    c10::intrusive_ptr<c10d::Work> header_work;
    std::vector<torch::Tensor> tensors;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // one per tensor
  };
  std::map<std::pair<int, int>, Expected> expected_;
  // The description (comm.cc, Layout) of the last activation message on a link and tag: sent
  // to (dst, tag), received from (src, tag). Both sides hold the same one.
  std::map<std::pair<int, int>, std::vector<int64_t>> sent_layouts_, received_layouts_;
  // Sends one tensor on the global group's `full_tag`, kept alive until WaitSends.
  void Send(torch::Tensor tensor, int dst, int full_tag);
  // Posts the receives of `tensors`, the i-th on `first_tag` + i.
  std::vector<c10::intrusive_ptr<c10d::Work>> PostRecvs(const std::vector<torch::Tensor>& tensors,
                                                        int src, int first_tag);
};

}  // namespace mitra::worker
