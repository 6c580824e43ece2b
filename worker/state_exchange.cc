#include "worker/state_exchange.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "checkpoint/tensor_file.h"
#include "mitra/worker/runtime.h"
#include "mitra/worker/stage.h"
#include "worker/checkpointer.h"
#include "worker/comm.h"
#include "worker/held_state.h"

namespace mitra::worker {
namespace {

// Tags of the exchange's messages, clear of the pipeline's (which it never overlaps anyway):
// message i of segment s is kTagBase + s * kTagsPerSegment + i, the first two being the header's
// length and the header.
constexpr int kTagBase = 1 << 24;
constexpr int kTagsPerSegment = 1 << 14;

const std::string& SegmentName(const Runtime& rt, int segment) {
  return rt.spec().segments.at(segment).name;
}

int Tag(int segment, size_t message) {
  return kTagBase + segment * kTagsPerSegment + static_cast<int>(message);
}

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
  for (const auto& [key, t] : live) payload.emplace_back(key, host(t));
  for (const auto& [param, tensors] : state) {
    for (const auto& [state_name, t] : tensors) {
      payload.emplace_back(state_name + "/" + param, host(t));
    }
  }
  return payload;
}

// How a segment's tensors travel: each tensor of at least kDirectBytes in a message of its own,
// straight from and into its memory; the smaller ones packed together into messages of about
// kDirectBytes (a segment has dozens of biases and norms, and each message costs the
// transport a little). Both sides derive the same grouping from the header. Every message is
// posted at once, so packing saves little beyond that cost and copies twice: 64 KB moved the
// bench GPT's change of stages at a median 1.25 GB/s over five runs, 1 MB at 1.06 GB/s.
constexpr int64_t kDirectBytes = 1 << 16;

int64_t Bytes(const TensorSpec& spec) {
  int64_t n = c10::elementSize(spec.dtype);
  for (int64_t d : spec.shape) n *= d;
  return n;
}

std::vector<std::vector<size_t>> Messages(const std::vector<TensorSpec>& specs) {
  std::vector<std::vector<size_t>> messages;
  std::vector<size_t> packed;
  int64_t packed_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t bytes = Bytes(specs[i]);
    if (bytes >= kDirectBytes) {
      messages.push_back({i});
      continue;
    }
    packed.push_back(i);
    packed_bytes += bytes;
    if (packed_bytes >= kDirectBytes) {
      messages.push_back(std::exchange(packed, {}));
      packed_bytes = 0;
    }
  }
  if (!packed.empty()) messages.push_back(std::move(packed));
  return messages;
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

// One segment on its way out: its tensors and what its header says of them.
struct Outgoing {
  SegmentTransfer transfer;
  Payload payload;
  std::vector<TensorSpec> specs;
};

// Posts the header of `out` (its length, then its text: messages 0 and 1).
void PostHeader(Comm& comm, Outgoing& out, std::vector<c10::intrusive_ptr<c10d::Work>>* works,
                std::vector<torch::Tensor>* keep) {
  const std::string header = Header(out.payload);
  out.specs = ParseHeader(header);
  torch::Tensor length = torch::tensor({static_cast<int64_t>(header.size())}, torch::kInt64);
  torch::Tensor text = torch::empty({static_cast<int64_t>(header.size())}, torch::kUInt8);
  std::copy(header.begin(), header.end(), text.data_ptr<uint8_t>());
  size_t message = 0;
  for (const torch::Tensor& t : {length, text}) {
    std::vector<torch::Tensor> one{t};
    works->push_back(comm.PostSend(one, out.transfer.to, Tag(out.transfer.segment, message++)));
    keep->push_back(t);
  }
}

// Posts the tensors of `out` (messages 2 on): a large one from its own memory, smaller ones
// packed.
void PostTensors(Comm& comm, const Outgoing& out,
                 std::vector<c10::intrusive_ptr<c10d::Work>>* works,
                 std::vector<torch::Tensor>* keep) {
  const std::vector<TensorSpec>& specs = out.specs;
  std::vector<torch::Tensor> messages;
  for (const std::vector<size_t>& group : Messages(specs)) {
    if (group.size() == 1 && Bytes(specs[group[0]]) >= kDirectBytes) {
      messages.push_back(out.payload[group[0]].second);
      continue;
    }
    torch::Tensor packed = PackedBuffer(specs, group);
    int64_t offset = 0;
    for (size_t i : group) {
      const int64_t n = Bytes(specs[i]);
      packed.narrow(0, offset, n).copy_(RawBytes(out.payload[i].second));
      offset += n;
    }
    messages.push_back(packed);
  }
  TORCH_CHECK(messages.size() + 2 < static_cast<size_t>(kTagsPerSegment), "segment ",
              out.transfer.segment, " has too many tensors to send");
  for (size_t i = 0; i < messages.size(); ++i) {
    std::vector<torch::Tensor> one{messages[i]};
    works->push_back(comm.PostSend(one, out.transfer.to, Tag(out.transfer.segment, i + 2)));
    keep->push_back(messages[i]);
  }
}

// One segment on its way in: where each of its tensors goes (the live parameter or buffer, a
// GPU stage's through a host buffer copied in once received, or new optimizer state) and the
// messages posted for it.
struct Incoming {
  SegmentTransfer transfer;
  std::string what;  // "the state of segment <name>"
  torch::Tensor length, text;  // the header's
  std::vector<TensorSpec> specs;
  std::vector<torch::Tensor> into;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> to_device;  // (host buffer, live tensor)
  std::map<std::string, std::map<std::string, torch::Tensor>> state;  // parameter -> name ->
  std::vector<torch::Tensor> messages;  // by message, from message 2 on
};

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
  for (size_t i = 0; i < works.size(); ++i) {
    comm.Wait(works[i], "receiving " + *expected[i].what + " from " +
                            comm.Describe(expected[i].from));
  }
}

// Works out where the tensors the header `specs` names go in this rank's stage.
Status PlaceIncoming(Runtime& rt, Incoming& in) {
  const std::map<std::string, torch::Tensor> live =
      SegmentTensors(rt.stage(), SegmentName(rt, in.transfer.segment));
  in.into.resize(in.specs.size());
  for (size_t i = 0; i < in.specs.size(); ++i) {
    const TensorSpec& spec = in.specs[i];
    if (auto it = live.find(spec.name); it != live.end()) {
      if (it->second.sizes().vec() != spec.shape || it->second.scalar_type() != spec.dtype ||
          !it->second.is_contiguous()) {
        return Status::Internal(in.what + ": " + spec.name + " differs in shape or type between "
                                "this rank and " + rt.comm().Describe(in.transfer.from));
      }
      in.into[i] = it->second.detach();
      if (!it->second.is_cpu()) {
        in.into[i] = torch::empty(spec.shape, torch::TensorOptions().dtype(spec.dtype));
        in.to_device.emplace_back(in.into[i], it->second);
      }
    } else {
      in.into[i] = torch::empty(spec.shape, torch::TensorOptions().dtype(spec.dtype));
      const size_t slash = spec.name.find('/');
      in.state[spec.name.substr(slash + 1)][spec.name.substr(0, slash)] = in.into[i];
    }
  }
  // A message of one large tensor lands in it; smaller ones share a buffer unpacked later.
  for (const std::vector<size_t>& group : Messages(in.specs)) {
    const bool direct = group.size() == 1 && Bytes(in.specs[group[0]]) >= kDirectBytes;
    in.messages.push_back(direct ? in.into[group[0]] : PackedBuffer(in.specs, group));
  }
  return Status::Ok();
}

// Unpacks the shared buffers, copies a GPU stage's tensors in and gives the optimizer its
// state. Returns the bytes received.
Result<int64_t> ApplyIncoming(Runtime& rt, Incoming& in) {
  torch::NoGradGuard no_grad;
  int64_t bytes = 0;
  const std::vector<std::vector<size_t>> groups = Messages(in.specs);
  for (size_t m = 0; m < groups.size(); ++m) {
    const torch::Tensor& message = in.messages[m];
    bytes += message.numel() * message.element_size();
    if (message.is_same(in.into[groups[m][0]])) continue;  // received in place
    int64_t offset = 0;
    for (size_t i : groups[m]) {
      const int64_t n = Bytes(in.specs[i]);
      RawBytes(in.into[i]).copy_(message.narrow(0, offset, n));
      offset += n;
    }
  }
  for (auto& [buffer, tensor] : in.to_device) tensor.copy_(buffer);
  const std::map<std::string, torch::Tensor> live =
      SegmentTensors(rt.stage(), SegmentName(rt, in.transfer.segment));
  for (const auto& [param, tensors] : in.state) {
    auto it = live.find("param/" + param);
    if (it == live.end()) {
      return Status::Internal(in.what + ": state for an unknown parameter " + param);
    }
    if (!rt.KeepsOptimizerStateOf(in.transfer.segment)) continue;  // another replica's (ZeRO-1)
    if (Status s = rt.optimizer().SetState(it->second, OnDeviceOf(it->second, tensors)); !s.ok()) {
      return s;
    }
  }
  return bytes;
}

// Receives every segment `transfers` sends to this rank, straight into its parameters and
// buffers, in three rounds over all of them at once (the headers' lengths, the headers, the
// tensors), so a segment costs no round trip of its own. Returns the bytes received.
Result<int64_t> ReceiveSegments(Runtime& rt, const std::vector<SegmentTransfer>& transfers) {
  Comm& comm = rt.comm();
  std::vector<Incoming> incoming;
  for (const SegmentTransfer& t : transfers) {
    Incoming& in = incoming.emplace_back();
    in.transfer = t;
    in.what = "the state of segment " + SegmentName(rt, t.segment);
  }
  std::vector<Expected> lengths, texts, tensors;
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
    for (size_t m = 0; m < in.messages.size(); ++m) {
      tensors.push_back({in.messages[m], in.transfer.from, Tag(in.transfer.segment, m + 2),
                         &in.what});
    }
  }
  ReceiveTogether(comm, tensors);
  int64_t received = 0;
  for (Incoming& in : incoming) {
    Result<int64_t> bytes = ApplyIncoming(rt, in);
    if (!bytes.ok()) return bytes.status();
    received += *bytes;
  }
  return received;
}

// Every rank's holding and rank 0's view of the checkpoint, in one all-gather.
std::vector<Holding> GatherHoldings(Comm& comm, const Holding& mine, int world,
                                    bool* checkpoint_complete) {
  torch::Tensor in = torch::tensor(
      {mine.step, static_cast<int64_t>(mine.first), static_cast<int64_t>(mine.end),
       static_cast<int64_t>(*checkpoint_complete)},
      torch::kInt64);
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < world; ++r) out[0].push_back(torch::empty_like(in));
  std::vector<torch::Tensor> inputs{in};
  comm.Wait(comm.global().allgather(out, inputs), "gathering what every rank holds");
  std::vector<Holding> held;
  for (int r = 0; r < world; ++r) {
    const auto* v = out[0][r].data_ptr<int64_t>();
    held.push_back({v[0], static_cast<int>(v[1]), static_cast<int>(v[2])});
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
// becomes rank 0's view.
ResumePlan PlanForJob(Runtime& rt, const HeldState* held, bool* checkpoint_complete) {
  const Placement& placement = rt.placement();
  const int64_t step = placement.resume_step;
  Holding mine;
  if (held != nullptr && held->step == step) mine = {step, held->first_segment, held->end_segment};
  const std::vector<Holding> holdings =
      GatherHoldings(rt.comm(), mine, placement.world_size(), checkpoint_complete);
  std::vector<std::vector<int>> needs(placement.world_size());
  const planner::ChunkLayout& layout = rt.layout();
  for (int r = 0; r < placement.world_size(); ++r) {
    const int stage = placement.stage_map.PositionOf(r).stage;
    for (int c = 0; c < layout.chunks; ++c) {
      const int j = layout.VirtualStage(stage, c);
      for (int i = rt.partition().FirstSegment(j); i < rt.partition().EndSegment(j); ++i) {
        needs[r].push_back(i);
      }
    }
  }
  return PlanResume(holdings, needs, step);
}

// This rank's part of the plan's transfers: every send first (asynchronous), then every
// receive; a rank blocked in a receive has posted all it sends, so the exchange cannot
// deadlock. Returns the bytes received.
Result<int64_t> Transfer(Runtime& rt, HeldState* held, const ResumePlan& plan) {
  const int me = rt.placement().rank;
  Comm& comm = rt.comm();
  std::vector<c10::intrusive_ptr<c10d::Work>> sends;
  std::vector<torch::Tensor> keep;
  // Every header first: the receivers place their tensors while the rest is packed.
  std::vector<Outgoing> outgoing;
  for (const SegmentTransfer& t : plan.transfers) {
    if (t.from != me) continue;
    Outgoing& out = outgoing.emplace_back();
    out.transfer = t;
    out.payload = SegmentPayload(rt, held, t.segment);
    PostHeader(comm, out, &sends, &keep);
  }
  for (const Outgoing& out : outgoing) PostTensors(comm, out, &sends, &keep);
  std::vector<SegmentTransfer> mine;
  for (const SegmentTransfer& t : plan.transfers) {
    if (t.to == me) mine.push_back(t);
  }
  const Result<int64_t> received = ReceiveSegments(rt, mine);
  if (!received.ok()) return received.status();
  for (auto& work : sends) comm.Wait(work, "sending state to a peer");
  return received;
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

// The totals, the same on every rank: the bytes moved and the slowest rank's times.
ResumeSummary Summarize(Comm& comm, const ResumePlan& plan, int64_t received, double seconds,
                        double transfer_s, bool checkpoint_complete) {
  std::vector<torch::Tensor> bytes{torch::tensor({static_cast<double>(received)}, torch::kFloat64)};
  std::vector<torch::Tensor> times{torch::tensor({seconds, transfer_s}, torch::kFloat64)};
  comm.Wait(comm.global().allreduce(bytes), "summing the bytes moved");
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  comm.Wait(comm.global().allreduce(times, max), "timing the exchange");
  ResumeSummary summary;
  summary.rank_sources = plan.rank_sources;
  summary.peer_bytes = static_cast<int64_t>(bytes[0].item<double>());
  summary.seconds = times[0][0].item<double>();
  summary.transfer_seconds = times[0][1].item<double>();
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
  const ResumePlan plan = PlanForJob(rt, held, &checkpoint_complete);
  const auto transfer_start = std::chrono::steady_clock::now();
  const Result<int64_t> received = Transfer(rt, held, plan);
  if (!received.ok()) return received.status();
  const double transfer_s = SecondsSince(transfer_start);
  if (Status s = ReadTheRest(rt, plan, checkpoint_complete, read_checkpoint); !s.ok()) return s;
  if (plan.trainer_donor >= 0) ShareTrainerState(rt, held, plan.trainer_donor);
  return Summarize(rt.comm(), plan, *received, SecondsSince(start), transfer_s,
                   checkpoint_complete);
}

}  // namespace mitra::worker
