#include "worker/state/state_exchange.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "checkpoint/tensor_file.h"
#include "mitra/worker/runtime.h"
#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"
#include "worker/state/checkpointer.h"
#include "worker/state/peer_memory.h"
#include "worker/step/held_state.h"
#include "worker/step/pipeline_partitions.h"

namespace mitra::worker {
namespace {

// Tags of the exchange's messages, clear of the pipeline's (the optimizer state still arrives
// during the first step; a pipeline tag reaches 2^24 only with 2^16 micro-batches times edges):
// message i of segment s is kTagBase + s * kTagsPerSegment + i, the first two being the header's
// length and the header; after a segment's messages come, between two processes of one
// machine, the table of their addresses in the sender's memory and, when the receiver copies
// from there, its word that it is done (TableTag, DoneTag).
constexpr int kTagBase = 1 << 24;
constexpr int kTagsPerSegment = 1 << 14;

const std::string& SegmentName(const Runtime& rt, int segment) {
  return rt.spec().segments.at(segment).name;
}

int Tag(int segment, size_t message) {
  return kTagBase + segment * kTagsPerSegment + static_cast<int>(message);
}
int TableTag(int segment, size_t messages) { return Tag(segment, messages + 2); }
int DoneTag(int segment, size_t messages) { return Tag(segment, messages + 3); }

StateSource Costlier(StateSource a, StateSource b) {
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

// One segment's state as it travels: "param/<name>", "buffer/<name>" and "<state>/<parameter>"
// (the checkpoint's names), in this order.
using Payload = std::vector<std::pair<std::string, torch::Tensor>>;

// The header names each tensor with its type and shape, one per line: "<name> <dtype> d0,d1,...".
std::string Header(const Payload& payload) {
  std::ostringstream out;
  for (const auto& [name, t] : payload) {
    out << name << ' ' << static_cast<int>(t.scalar_type()) << ' ';
    for (int64_t d = 0; d < t.dim(); ++d) out << (d ? "," : "") << t.size(d);
    out << '\n';
  }
  return out.str();
}

struct TensorSpec {
  std::string name;
  c10::ScalarType dtype;
  std::vector<int64_t> shape;
};

std::vector<TensorSpec> ParseHeader(const std::string& text) {
  std::vector<TensorSpec> specs;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    TensorSpec spec;
    int dtype = 0;
    std::string shape;
    words >> spec.name >> dtype >> shape;
    spec.dtype = static_cast<c10::ScalarType>(dtype);
    std::istringstream dims(shape);
    for (std::string d; std::getline(dims, d, ',');) {
      if (!d.empty()) spec.shape.push_back(std::stoll(d));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The parameters and buffers of a segment module under the checkpoint's names (as
// SegmentTensors names a stage's).
std::map<std::string, torch::Tensor> ModuleTensors(const cutpoint::Segment& segment) {
  std::map<std::string, torch::Tensor> live;
  for (const auto& item : segment.named_parameters(/*recurse=*/true)) {
    live["param/" + item.key()] = item.value();
  }
  for (const auto& item : segment.named_buffers(/*recurse=*/true)) {
    if (item.value().defined()) live["buffer/" + item.key()] = item.value();
  }
  return live;
}

// What this rank sends of `segment`: from its stage when it kept it, else from what it held.
Payload SegmentPayload(Runtime& rt, HeldState* held, int segment) {
  const Stage& stage = rt.stage();
  const std::string& name = SegmentName(rt, segment);
  Payload payload;
  std::map<std::string, torch::Tensor> live;
  std::map<std::string, std::map<std::string, torch::Tensor>> state;  // local parameter name ->
  if (stage.Holds(segment) && stage.Adopted(segment)) {
    live = SegmentTensors(stage, name);
    for (const auto& [key, t] : live) {
      if (key.rfind("param/", 0) != 0) continue;
      for (auto& [state_name, s] : rt.optimizer().State(t)) state[key.substr(6)][state_name] = s;
    }
  } else {
    const cutpoint::Segment& module = *held->segments.at(segment - held->first_segment);
    live = ModuleTensors(module);
    const std::string prefix = name + ".";
    for (const auto& [qualified, s] : held->optimizer_state) {
      if (qualified.rfind(prefix, 0) == 0) state[qualified.substr(prefix.size())] = s;
    }
  }
  // In host memory: the messages are packed and sent as bytes there (Gloo moves host memory; a
  // GPU stage's tensors are copied out, a CPU stage's are sent from where they are).
  const auto host = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); };
  // The messages leave while this rank trains its first step, which changes no parameter and
  // no optimizer state before it waits for them (StateInFlight::Finish), but changes buffers
  // (BatchNorm's statistics): those go as copies.
  for (const auto& [key, t] : live) {
    payload.emplace_back(key, key.rfind("buffer/", 0) == 0 ? host(t).clone() : host(t));
  }
  for (const auto& [param, tensors] : state) {
    for (const auto& [state_name, t] : tensors) {
      payload.emplace_back(state_name + "/" + param, host(t));
    }
  }
  return payload;
}

// When a tensor of a segment's state must have arrived, which its name says: the model's
// parameters and buffers before training starts, the optimizer state only before the first
// update, so it goes on arriving while the first step computes (StateInFlight). Receives are
// posted in this order, and a sender's messages leave in the order their receives were posted.
enum class Part { kModel, kOptimizerState };
constexpr Part kParts[] = {Part::kModel, Part::kOptimizerState};

Part PartOf(const std::string& name) {
  const bool model = name.rfind("param/", 0) == 0 || name.rfind("buffer/", 0) == 0;
  return model ? Part::kModel : Part::kOptimizerState;
}

// How a segment's tensors travel: each tensor of at least kDirectBytes in a message of its own,
// straight from and into its memory; the smaller ones packed together into messages of about
// kDirectBytes (a segment has dozens of biases and norms, and each message costs the
// transport a little), never two parts in one message. Both sides derive the same grouping
// from the header. Every message is posted at once, so packing saves little beyond that cost
// and copies twice: 64 KB moved the bench GPT's change of stages at a median 1.25 GB/s over
// five runs, 1 MB at 1.06 GB/s. Buffers are always packed, whatever their size: the sender
// trains while its messages leave (or are copied), and its forward changes buffers (BatchNorm's
// running statistics) in place, so they travel as the copy taken before it trains.
constexpr int64_t kDirectBytes = 1 << 16;

int64_t Bytes(const TensorSpec& spec) {
  int64_t n = c10::elementSize(spec.dtype);
  for (int64_t d : spec.shape) n *= d;
  return n;
}

// Whether a tensor travels in a message of its own, from and into its own memory.
bool OwnMessage(const TensorSpec& spec) {
  return Bytes(spec) >= kDirectBytes && spec.name.rfind("buffer/", 0) != 0;
}

// The messages of a segment, each a list of indices into `specs`, all of one part.
using Groups = std::vector<std::vector<size_t>>;

Groups Messages(const std::vector<TensorSpec>& specs) {
  Groups messages;
  std::vector<size_t> packed;
  int64_t packed_bytes = 0;
  const auto flush = [&] {
    if (!packed.empty()) messages.push_back(std::exchange(packed, {}));
    packed_bytes = 0;
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!packed.empty() && PartOf(specs[packed[0]].name) != PartOf(specs[i].name)) flush();
    const int64_t bytes = Bytes(specs[i]);
    if (OwnMessage(specs[i])) {
      messages.push_back({i});
      continue;
    }
    packed.push_back(i);
    packed_bytes += bytes;
    if (packed_bytes >= kDirectBytes) flush();
  }
  flush();
  return messages;
}

bool Direct(const std::vector<TensorSpec>& specs, const std::vector<size_t>& group) {
  return group.size() == 1 && OwnMessage(specs[group[0]]);
}

// The part a message of the segment `specs` carries (one: Messages never mixes them).
Part PartOf(const std::vector<TensorSpec>& specs, const std::vector<size_t>& group) {
  return PartOf(specs[group[0]].name);
}

// The bytes of `t` (contiguous) as a flat uint8 tensor sharing its memory.
torch::Tensor RawBytes(const torch::Tensor& t) {
  return torch::from_blob(t.data_ptr(), {static_cast<int64_t>(t.numel() * t.element_size())},
                          torch::TensorOptions().dtype(torch::kUInt8));
}

// A message of the tensors `group` of `tensors`: the tensor itself when alone, else a packed
// copy (sender) or a buffer to unpack (receiver).
torch::Tensor PackedBuffer(const std::vector<TensorSpec>& specs, const std::vector<size_t>& group) {
  int64_t bytes = 0;
  for (size_t i : group) bytes += Bytes(specs[i]);
  return torch::empty({bytes}, torch::TensorOptions().dtype(torch::kUInt8));
}

// One segment on its way out: its tensors, what its header says of them, and its messages.
struct Outgoing {
  SegmentTransfer transfer;
  Payload payload;
  std::vector<TensorSpec> specs;
  Groups groups;
  std::vector<torch::Tensor> messages;  // by group: a tensor of the payload, or a packed copy
  torch::Tensor length, text;           // the header's
  bool copied = false;   // the receiver copies the messages from this process's memory
  torch::Tensor table;   // each message's address and bytes, for a receiver on this machine
  torch::Tensor done;    // where the copying receiver's word that it is done lands
};

// Posts the header of `out` (its length, then its text: messages 0 and 1).
void PostHeader(Comm& comm, Outgoing& out, std::vector<c10::intrusive_ptr<c10d::Work>>* works) {
  const std::string header = Header(out.payload);
  out.specs = ParseHeader(header);
  out.length = torch::tensor({static_cast<int64_t>(header.size())}, torch::kInt64);
  out.text = torch::empty({static_cast<int64_t>(header.size())}, torch::kUInt8);
  std::copy(header.begin(), header.end(), out.text.data_ptr<uint8_t>());
  size_t message = 0;
  for (const torch::Tensor& t : {out.length, out.text}) {
    std::vector<torch::Tensor> one{t};
    works->push_back(comm.PostSend(one, out.transfer.to, Tag(out.transfer.segment, message++)));
  }
}

// Groups the tensors of `out` into its messages: a large one is sent from its own memory,
// smaller ones packed.
void Pack(Outgoing& out) {
  out.groups = Messages(out.specs);
  TORCH_CHECK(out.groups.size() + 4 < static_cast<size_t>(kTagsPerSegment), "segment ",
              out.transfer.segment, " has too many tensors to send");
  for (const std::vector<size_t>& group : out.groups) {
    if (Direct(out.specs, group)) {
      out.messages.push_back(out.payload[group[0]].second);
      continue;
    }
    torch::Tensor packed = PackedBuffer(out.specs, group);
    int64_t offset = 0;
    for (size_t i : group) {
      const int64_t n = Bytes(out.specs[i]);
      packed.narrow(0, offset, n).copy_(RawBytes(out.payload[i].second));
      offset += n;
    }
    out.messages.push_back(packed);
  }
}

// Posts the table of `out`'s messages, their addresses and bytes, for a receiver on this
// machine, which may copy them (the ranks decide that later, all together).
void PostTable(Comm& comm, Outgoing& out, std::vector<c10::intrusive_ptr<c10d::Work>>* works) {
  out.table = torch::empty({2 * static_cast<int64_t>(out.messages.size())}, torch::kInt64);
  int64_t* table = out.table.data_ptr<int64_t>();
  for (size_t m = 0; m < out.messages.size(); ++m) {
    table[2 * m] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out.messages[m].data_ptr()));
    table[2 * m + 1] = out.messages[m].numel() * out.messages[m].element_size();
  }
  const size_t n = out.groups.size();
  std::vector<torch::Tensor> table_message{out.table};
  works->push_back(comm.PostSend(table_message, out.transfer.to, TableTag(out.transfer.segment, n)));
}

// Posts the receive of the word that the receiver copying `out` is done, which the messages'
// memory waits for.
void PostDoneReceive(Comm& comm, Outgoing& out,
                     std::vector<c10::intrusive_ptr<c10d::Work>>* works) {
  const size_t n = out.groups.size();
  out.done = torch::empty({1}, torch::kInt64);
  std::vector<torch::Tensor> done{out.done};
  works->push_back(comm.PostRecv(done, out.transfer.to, DoneTag(out.transfer.segment, n)));
}

// Posts the messages of `out` (2 on) that carry `part`.
void PostTensors(Comm& comm, const Outgoing& out, Part part,
                 std::vector<c10::intrusive_ptr<c10d::Work>>* works) {
  for (size_t m = 0; m < out.groups.size(); ++m) {
    if (PartOf(out.specs, out.groups[m]) != part) continue;
    std::vector<torch::Tensor> one{out.messages[m]};
    works->push_back(comm.PostSend(one, out.transfer.to, Tag(out.transfer.segment, m + 2)));
  }
}

// One segment on its way in: where each of its tensors goes (the live parameter or buffer, a
// GPU stage's through a host buffer copied in once received, or new optimizer state) and the
// messages posted for it.
struct Incoming {
  SegmentTransfer transfer;
  std::string what;  // "the state of segment <name> from <rank>"
  torch::Tensor length, text;  // the header's
  std::vector<TensorSpec> specs;
  std::vector<torch::Tensor> into;
  std::vector<torch::Tensor> device;  // by tensor: a GPU stage's live tensor (else undefined)
  std::map<std::string, std::map<std::string, torch::Tensor>> state;  // parameter -> name ->
  Groups groups;
  std::vector<torch::Tensor> messages;  // by group
  std::vector<c10::intrusive_ptr<c10d::Work>> works;  // by group, once posted
  // From a sender on this machine, its table (each message's address and bytes in its memory;
  // table_work undefined for another machine's). Copied from there instead of received: the
  // sender's process and this rank's word that it is done.
  torch::Tensor table;
  c10::intrusive_ptr<c10d::Work> table_work;
  bool copied = false;
  int64_t pid = 0;
  torch::Tensor done;
  c10::intrusive_ptr<c10d::Work> done_work;  // once posted
};

// Copies message `m` of `in` from the sender's memory (the table received).
void CopyMessage(Incoming& in, size_t m) {
  const int64_t* table = in.table.data_ptr<int64_t>();
  const torch::Tensor& message = in.messages[m];
  const int64_t bytes = message.numel() * message.element_size();
  if (table[2 * m + 1] != bytes) {
    throw PeerError(in.what + ": message " + std::to_string(m) + " is " +
                    std::to_string(table[2 * m + 1]) + " bytes there, " + std::to_string(bytes) +
                    " here");
  }
  ReadPeerMemory(in.pid, table[2 * m], message.data_ptr(), bytes, "copying " + in.what);
}

// A message this rank expects: into which tensor, from whom, and what it is (for errors).
struct Expected {
  torch::Tensor into;
  int from = 0, tag = 0;
  const std::string* what = nullptr;
};

// Posts every receive of `expected` and then waits for them all: the senders posted theirs
// already, so the messages arrive together instead of one round trip each.
void ReceiveTogether(Comm& comm, const std::vector<Expected>& expected) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const Expected& e : expected) {
    std::vector<torch::Tensor> one{e.into};
    works.push_back(comm.PostRecv(one, e.from, e.tag));
  }
  for (size_t i = 0; i < works.size(); ++i) comm.Wait(works[i], "receiving " + *expected[i].what);
}

// Works out where the tensors the header `specs` names go in this rank's stage.
Status PlaceIncoming(Runtime& rt, Incoming& in) {
  const std::map<std::string, torch::Tensor> live =
      SegmentTensors(rt.stage(), SegmentName(rt, in.transfer.segment));
  in.into.resize(in.specs.size());
  in.device.resize(in.specs.size());
  for (size_t i = 0; i < in.specs.size(); ++i) {
    const TensorSpec& spec = in.specs[i];
    if (auto it = live.find(spec.name); it != live.end()) {
      if (it->second.sizes().vec() != spec.shape || it->second.scalar_type() != spec.dtype ||
          !it->second.is_contiguous()) {
        return Status::Internal(in.what + ": " + spec.name + " differs in shape or type on "
                                "this rank");
      }
      in.into[i] = it->second.detach();
      if (!it->second.is_cpu()) {
        in.into[i] = torch::empty(spec.shape, torch::TensorOptions().dtype(spec.dtype));
        in.device[i] = it->second.detach();
      }
    } else {
      const size_t slash = spec.name.find('/');
      const std::string param = spec.name.substr(slash + 1);
      if (live.count("param/" + param) == 0) {
        return Status::Internal(in.what + ": state for an unknown parameter " + param);
      }
      in.into[i] = torch::empty(spec.shape, torch::TensorOptions().dtype(spec.dtype));
      in.state[param][spec.name.substr(0, slash)] = in.into[i];
    }
  }
  // A message of one large tensor lands in it; smaller ones share a buffer unpacked later.
  in.groups = Messages(in.specs);
  for (const std::vector<size_t>& group : in.groups) {
    in.messages.push_back(Direct(in.specs, group) ? in.into[group[0]]
                                                  : PackedBuffer(in.specs, group));
  }
  return Status::Ok();
}

// Puts message `m` of `in`, received, where its tensors go: unpacks a shared buffer, copies a
// GPU stage's tensors in.
void Unpack(Incoming& in, size_t m) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& message = in.messages[m];
  int64_t offset = 0;
  for (size_t i : in.groups[m]) {
    const int64_t n = Bytes(in.specs[i]);
    if (!message.is_same(in.into[i])) RawBytes(in.into[i]).copy_(message.narrow(0, offset, n));
    if (in.device[i].defined()) in.device[i].copy_(in.into[i]);
    offset += n;
  }
}

// Brings in every message of `in` that carries `part` (copied from the sender's memory, or
// waited for) and puts its tensors where they go.
void TakeMessages(Comm& comm, Incoming& in, Part part) {
  for (size_t m = 0; m < in.groups.size(); ++m) {
    if (PartOf(in.specs, in.groups[m]) != part) continue;
    if (in.copied) {
      CopyMessage(in, m);
    } else {
      comm.Wait(in.works[m], "receiving " + in.what);
    }
    Unpack(in, m);
  }
}

}  // namespace

// The transfers of a resume still on their way when training starts: this rank's incoming
// segments with their messages posted, and the messages it sends, kept until they are sent.
struct StateInFlight::Transfers {
  std::vector<Incoming> incoming;
  std::vector<Outgoing> outgoing;
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
};

namespace {

// Receives the headers of every segment the plan sends to this rank, in two rounds over all of
// them at once (the lengths, then the texts), so a segment costs no round trip of its own, works
// out where their tensors go, and posts the receive of the table of each sender on this machine
// (its messages' addresses: it arrives while the ranks decide whether to copy).
Status ReceiveHeaders(Runtime& rt, const ResumePlan& plan,
                      const std::vector<ProcessAddress>& processes,
                      StateInFlight::Transfers* state) {
  Comm& comm = rt.comm();
  std::vector<Incoming>& incoming = state->incoming;
  for (const SegmentTransfer& t : plan.transfers) {
    if (t.to != rt.placement().rank) continue;
    Incoming& in = incoming.emplace_back();
    in.transfer = t;
    in.what = "the state of segment " + SegmentName(rt, t.segment) + " from " +
              comm.Describe(t.from);
  }
  std::vector<Expected> lengths, texts;
  for (Incoming& in : incoming) {
    in.length = torch::empty({1}, torch::kInt64);
    lengths.push_back({in.length, in.transfer.from, Tag(in.transfer.segment, 0), &in.what});
  }
  ReceiveTogether(comm, lengths);
  for (Incoming& in : incoming) {
    in.text = torch::empty({in.length.item<int64_t>()}, torch::kUInt8);
    texts.push_back({in.text, in.transfer.from, Tag(in.transfer.segment, 1), &in.what});
  }
  ReceiveTogether(comm, texts);
  for (Incoming& in : incoming) {
    in.specs = ParseHeader(
        std::string(reinterpret_cast<const char*>(in.text.data_ptr<uint8_t>()), in.text.numel()));
    if (Status s = PlaceIncoming(rt, in); !s.ok()) return s;
    in.works.resize(in.groups.size());
    if (SameHost(ThisProcess(), processes[in.transfer.from])) {
      in.table = torch::empty({2 * static_cast<int64_t>(in.groups.size())}, torch::kInt64);
      std::vector<torch::Tensor> one{in.table};
      in.table_work =
          comm.PostRecv(one, in.transfer.from, TableTag(in.transfer.segment, in.groups.size()));
    }
  }
  return Status::Ok();
}

// Every rank's holding and process, and rank 0's view of the checkpoint, in one all-gather.
std::vector<Holding> GatherHoldings(Comm& comm, const Holding& mine, int world,
                                    bool* checkpoint_complete,
                                    std::vector<ProcessAddress>* processes) {
  const ProcessAddress me = ThisProcess();
  torch::Tensor in = torch::tensor(
      {mine.step, static_cast<int64_t>(mine.first), static_cast<int64_t>(mine.end),
       static_cast<int64_t>(*checkpoint_complete), me.host_key, me.pid, me.canary_address,
       me.canary_value},
      torch::kInt64);
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < world; ++r) out[0].push_back(torch::empty_like(in));
  std::vector<torch::Tensor> inputs{in};
  comm.Wait(comm.global().allgather(out, inputs), "gathering what every rank holds");
  std::vector<Holding> held;
  for (int r = 0; r < world; ++r) {
    const auto* v = out[0][r].data_ptr<int64_t>();
    held.push_back({v[0], static_cast<int>(v[1]), static_cast<int>(v[2])});
    processes->push_back({v[4], v[5], v[6], v[7]});
  }
  *checkpoint_complete = out[0][0].data_ptr<int64_t>()[3] != 0;
  return held;
}

// The donor's trainer state, broadcast to every rank and applied there.
void ShareTrainerState(Runtime& rt, const HeldState* held, int donor) {
  Comm& comm = rt.comm();
  const bool mine = rt.placement().rank == donor;
  torch::Tensor scale = torch::zeros({2}, torch::kFloat64);
  torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  if (mine) {
    scale[0] = held->trainer.loss_scale;
    scale[1] = static_cast<double>(held->trainer.loss_scale_good_steps);
    rng = held->trainer.rng_state.clone();
  }
  c10d::BroadcastOptions options;
  options.rootRank = donor;
  for (torch::Tensor& t : {std::ref(scale), std::ref(rng)}) {  // Gloo wants one type per call
    std::vector<torch::Tensor> one{t};
    comm.Wait(comm.global().broadcast(one, options), "sharing the trainer state");
  }
  if (LossScaler* scaler = rt.loss_scaler(); scaler && scale[0].item<double>() > 0) {
    scaler->Restore(scale[0].item<double>(), static_cast<int64_t>(scale[1].item<double>()));
  }
  auto* gen = at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
  gen->set_state(*rng.unsafeGetTensorImpl());
}

}  // namespace

const char* StateSourceName(StateSource source) {
  switch (source) {
    case StateSource::kKept: return "kept";
    case StateSource::kPeer: return "peer";
    case StateSource::kCheckpoint: return "checkpoint";
  }
  return "?";
}

ResumePlan PlanResume(const std::vector<Holding>& held, const std::vector<std::vector<int>>& needs,
                      int64_t step) {
  const int world = static_cast<int>(needs.size());
  ResumePlan plan;
  plan.rank_sources.assign(world, StateSource::kKept);
  std::vector<int> sending(held.size(), 0);  // segments each rank sends so far
  for (int to = 0; to < world; ++to) {
    for (int segment : needs[to]) {
      if (held[to].Holds(segment, step)) continue;
      int from = -1;
      for (int r = 0; r < static_cast<int>(held.size()); ++r) {
        if (held[r].Holds(segment, step) && (from < 0 || sending[r] < sending[from])) from = r;
      }
      StateSource source = StateSource::kCheckpoint;
      if (from >= 0) {
        ++sending[from];
        plan.transfers.push_back({segment, from, to});
        source = StateSource::kPeer;
      } else {
        plan.from_checkpoint.emplace_back(to, segment);
      }
      plan.rank_sources[to] = Costlier(plan.rank_sources[to], source);
    }
  }
  for (int r = 0; r < static_cast<int>(held.size()); ++r) {
    if (held[r].step == step && held[r].end > held[r].first) {
      plan.trainer_donor = r;
      break;
    }
  }
  return plan;
}

namespace {

// Every rank's holding, gathered, and the plan all ranks derive from it; `checkpoint_complete`
// becomes rank 0's view, `processes` every rank's process.
ResumePlan PlanForJob(Runtime& rt, const HeldState* held, bool* checkpoint_complete,
                      std::vector<ProcessAddress>* processes) {
  const Placement& placement = rt.placement();
  const int64_t step = placement.resume_step;
  Holding mine;
  if (held != nullptr && held->step == step) mine = {step, held->first_segment, held->end_segment};
  const std::vector<Holding> holdings =
      GatherHoldings(rt.comm(), mine, placement.world_size(), checkpoint_complete, processes);
  std::vector<std::vector<int>> needs(placement.world_size());
  for (int r = 0; r < placement.world_size(); ++r) needs[r] = rt.pipelines().SegmentsOf(r);
  return PlanResume(holdings, needs, step);
}

// This rank's headers of the plan's transfers, posted (asynchronous), and their messages
// packed: every header first, so that the receivers place their tensors while the rest is
// packed; then the tables of the receivers on this machine, so that one which copies finds
// its table there when the ranks have decided to.
void SendHeaders(Runtime& rt, HeldState* held, const ResumePlan& plan,
                 const std::vector<ProcessAddress>& processes, StateInFlight::Transfers* state) {
  for (const SegmentTransfer& t : plan.transfers) {
    if (t.from != rt.placement().rank) continue;
    Outgoing& out = state->outgoing.emplace_back();
    out.transfer = t;
    out.payload = SegmentPayload(rt, held, t.segment);
    PostHeader(rt.comm(), out, &state->sends);
  }
  for (Outgoing& out : state->outgoing) Pack(out);
  for (Outgoing& out : state->outgoing) {
    if (SameHost(ThisProcess(), processes[out.transfer.to])) {
      PostTable(rt.comm(), out, &state->sends);
    }
  }
}

// Every message of the transfers, this rank's sends and receives, posted: the receives of the
// copying receivers' words, then the model's messages, then the optimizer state's. Then waits
// for (or copies) the model's parameters and buffers it receives.
void PostTransfers(Comm& comm, StateInFlight::Transfers* state) {
  for (Outgoing& out : state->outgoing) {
    if (out.copied) PostDoneReceive(comm, out, &state->sends);
  }
  for (Part part : kParts) {
    for (const Outgoing& out : state->outgoing) {
      if (!out.copied) PostTensors(comm, out, part, &state->sends);
    }
  }
  for (Part part : kParts) {
    for (Incoming& in : state->incoming) {
      if (in.copied) continue;
      for (size_t m = 0; m < in.groups.size(); ++m) {
        if (PartOf(in.specs, in.groups[m]) != part) continue;
        std::vector<torch::Tensor> one{in.messages[m]};
        in.works[m] = comm.PostRecv(one, in.transfer.from, Tag(in.transfer.segment, m + 2));
      }
    }
  }
  for (Incoming& in : state->incoming) {
    if (in.table_work) comm.Wait(in.table_work, "receiving the table of " + in.what);
    TakeMessages(comm, in, Part::kModel);
  }
}

// What this rank would copy: the bytes it receives from peers of its machine, and whether it
// can read every one of them (CanRead). The pairs on one machine copy only when every rank can.
struct CopyWish {
  int64_t bytes = 0;
  bool cannot = false;
};

CopyWish WishToCopy(const StateInFlight::Transfers& state,
                    const std::vector<ProcessAddress>& processes) {
  CopyWish wish;
  for (const Incoming& in : state.incoming) {
    const ProcessAddress& from = processes[in.transfer.from];
    if (!SameHost(ThisProcess(), from)) continue;
    if (!CanRead(from)) wish.cannot = true;
    for (const torch::Tensor& message : in.messages) {
      wish.bytes += message.numel() * message.element_size();
    }
  }
  return wish;
}

// Marks the transfers between two processes of one machine as copied, when `copy`.
void MarkCopied(StateInFlight::Transfers* state, const std::vector<ProcessAddress>& processes,
                bool copy) {
  const ProcessAddress me = ThisProcess();
  for (Outgoing& out : state->outgoing) out.copied = copy && SameHost(me, processes[out.transfer.to]);
  for (Incoming& in : state->incoming) {
    in.copied = copy && SameHost(me, processes[in.transfer.from]);
    in.pid = processes[in.transfer.from].pid;
  }
}

// The bytes `state` receives, all parts.
int64_t BytesToReceive(const StateInFlight::Transfers& state) {
  int64_t bytes = 0;
  for (const Incoming& in : state.incoming) {
    for (const torch::Tensor& message : in.messages) bytes += message.numel() * message.element_size();
  }
  return bytes;
}

// The optimizer state a rank copies from the memory of peers on its machine, once training
// waits for the parameters only, is copied before training starts rather than on a thread when
// it is at most this: 16 MiB take 1.6 ms at the 10 GB/s of such a copy on transparent huge
// pages, where a new thread waited 1-5 ms for a core while four workers shared two
// (docs/performance.md, state from peers, item 14).
constexpr int64_t kInlineCopyBytes = int64_t{16} << 20;
std::atomic<int64_t> g_inline_copy_bytes{kInlineCopyBytes};

// Whether every incoming segment of `state` is copied and their optimizer state is small.
bool CopiesFewBytes(const StateInFlight::Transfers& state) {
  int64_t bytes = 0;
  for (const Incoming& in : state.incoming) {
    if (!in.copied) return false;
    for (size_t m = 0; m < in.groups.size(); ++m) {
      if (PartOf(in.specs, in.groups[m]) != Part::kOptimizerState) continue;
      bytes += in.messages[m].numel() * in.messages[m].element_size();
    }
  }
  return bytes <= g_inline_copy_bytes.load();
}

// What no rank holds: this rank's segments of it, and the trainer state when no rank holds
// any, from the checkpoint of the step.
Status ReadTheRest(Runtime& rt, const ResumePlan& plan, bool checkpoint_complete,
                   const CheckpointReader& read_checkpoint) {
  std::vector<int> segments;
  for (const auto& [rank, segment] : plan.from_checkpoint) {
    if (rank == rt.placement().rank) segments.push_back(segment);
  }
  const bool trainer_state = plan.trainer_donor < 0;
  if (segments.empty() && !trainer_state) return Status::Ok();
  if (!checkpoint_complete) {
    return Status::IoError("no rank holds the state of step " +
                           std::to_string(rt.placement().resume_step) + " of segment " +
                           SegmentName(rt, segments.empty() ? 0 : segments[0]) +
                           ", and no complete checkpoint of that step exists");
  }
  return read_checkpoint(segments, trainer_state);
}

// The totals, the same on every rank: the bytes the transfers move, and whether the pairs on
// one machine copy (no rank's `wish` says it cannot), which `copy` gets, and then how many of
// the bytes; the times come once they are done (CompleteResumeSummary).
ResumeSummary Summarize(Comm& comm, const ResumePlan& plan, int64_t received,
                        bool checkpoint_complete, const CopyWish& wish, bool* copy) {
  std::vector<torch::Tensor> sums{torch::tensor(
      {static_cast<double>(received), static_cast<double>(wish.bytes),
       static_cast<double>(wish.cannot)},
      torch::kFloat64)};
  comm.Wait(comm.global().allreduce(sums), "summing the bytes moved");
  *copy = sums[0][2].item<double>() == 0;
  ResumeSummary summary;
  summary.rank_sources = plan.rank_sources;
  summary.peer_bytes = static_cast<int64_t>(sums[0][0].item<double>());
  summary.copied_bytes = *copy ? static_cast<int64_t>(sums[0][1].item<double>()) : 0;
  summary.checkpoint_complete = checkpoint_complete;
  for (StateSource s : plan.rank_sources) {
    (s == StateSource::kKept ? summary.kept : s == StateSource::kPeer ? summary.peer
                                                                      : summary.checkpoint)++;
  }
  return summary;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<ResumeSummary> ResumeFromPeers(Runtime& rt, HeldState* held, bool checkpoint_complete,
                                      const CheckpointReader& read_checkpoint) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<ProcessAddress> processes;
  const ResumePlan plan = PlanForJob(rt, held, &checkpoint_complete, &processes);
  auto state = std::make_unique<StateInFlight::Transfers>();
  SendHeaders(rt, held, plan, processes, state.get());
  if (Status s = ReceiveHeaders(rt, plan, processes, state.get()); !s.ok()) return s;
  if (Status s = ReadTheRest(rt, plan, checkpoint_complete, read_checkpoint); !s.ok()) return s;
  // The collectives before the tensors: on a pair of ranks that also moves state, a message
  // waits for every one posted before it.
  if (plan.trainer_donor >= 0) ShareTrainerState(rt, held, plan.trainer_donor);
  bool copy = false;
  ResumeSummary summary = Summarize(rt.comm(), plan, BytesToReceive(*state), checkpoint_complete,
                                    WishToCopy(*state, processes), &copy);
  MarkCopied(state.get(), processes, copy);
  const auto transfer_start = std::chrono::steady_clock::now();
  PostTransfers(rt.comm(), state.get());
  auto in_flight = std::make_unique<StateInFlight>(rt.comm(), std::move(state), transfer_start);
  if (Status s = in_flight->GiveStateIfArrived(rt); !s.ok()) return s;
  summary.seconds = SecondsSince(start);  // this rank's, until CompleteResumeSummary
  rt.ExpectStateFromPeers(std::move(in_flight), summary.seconds);
  return summary;
}

void SetInlineCopyBytesForTesting(int64_t bytes) {
  g_inline_copy_bytes = bytes < 0 ? kInlineCopyBytes : bytes;
}

void CompleteResumeSummary(const Runtime& rt, ResumeSummary* summary) {
  const Runtime::ResumeTimes& slowest = rt.resume_times();
  summary->seconds = slowest.exchange_s;
  summary->transfer_seconds = slowest.arrival_s;
  summary->first_step_wait_s = slowest.wait_s;
}

// StateInFlight

StateInFlight::StateInFlight(Comm& comm, std::unique_ptr<Transfers> transfers,
                             std::chrono::steady_clock::time_point start)
    : comm_(comm), transfers_(std::move(transfers)), start_(start) {
  if (transfers_->incoming.empty()) return;
  if (CopiesFewBytes(*transfers_)) {
    Receive();
    return;
  }
  thread_ = std::thread([this] { Receive(); });
}

StateInFlight::~StateInFlight() { Abort(); }

// Receives the optimizer state, on the thread or, for a small copy, in the constructor.
void StateInFlight::Receive() {
  try {
    for (Incoming& in : transfers_->incoming) {
      TakeMessages(comm_, in, Part::kOptimizerState);
      // Every message of the segment copied: its sender may change or free their memory.
      if (in.copied) {
        in.done = torch::ones({1}, torch::kInt64);
        std::vector<torch::Tensor> one{in.done};
        in.done_work =
            comm_.PostSend(one, in.transfer.from, DoneTag(in.transfer.segment, in.groups.size()));
      }
    }
    arrival_s_ = SecondsSince(start_);
  } catch (...) {
    error_ = std::current_exception();
  }
}

Status StateInFlight::GiveStateIfArrived(Runtime& rt) {
  if (thread_.joinable() || error_ || given_) return Status::Ok();
  return GiveState(rt);
}

Status StateInFlight::Finish(Runtime& rt) {
  const auto start = std::chrono::steady_clock::now();
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
  for (Incoming& in : transfers_->incoming) {
    if (in.done_work) comm_.Wait(in.done_work, "telling a peer its state was copied");
  }
  for (auto& work : transfers_->sends) comm_.Wait(work, "sending state to a peer");
  transfers_->sends.clear();
  wait_s_ = SecondsSince(start);
  return given_ ? Status::Ok() : GiveState(rt);
}

Status StateInFlight::GiveState(Runtime& rt) {
  given_ = true;
  const Stage& stage = rt.stage();
  for (const Incoming& in : transfers_->incoming) {
    if (!rt.KeepsOptimizerStateOf(in.transfer.segment)) continue;  // another replica's (ZeRO-1)
    const std::string prefix = SegmentName(rt, in.transfer.segment) + ".";
    for (const auto& [param, tensors] : in.state) {
      const torch::Tensor live = stage.Find(prefix + param);
      if (Status s = rt.optimizer().SetState(live, OnDeviceOf(live, tensors)); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

void StateInFlight::Abort() {
  if (!thread_.joinable()) return;
  for (Incoming& in : transfers_->incoming) {
    for (auto& work : in.works) {
      if (work && !work->isCompleted()) work->abort();
    }
  }
  thread_.join();
}

}  // namespace mitra::worker
