#include "worker/profiler.h"

#include <malloc.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/free_port.h"
#include "common/median.h"
#include "mitra/cutpoint/linear.h"
#include "mitra/worker/backend.h"
#include "planner/profile.h"
#include "planner/sharing.h"
#include "worker/comm/comm.h"
#include "worker/comm/report.h"

namespace mitra::worker {
namespace {

using cutpoint::Activations;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<std::string> machines;
  std::vector<int> slots;
  std::vector<int64_t> micro_batches;
  int repeats = 5;
  int machine = 0;  // this rank's
};

Result<Settings> ReadSettings(const Placement& placement, const RuntimeOptions& options) {
  // Segments are measured in host memory on the CPU: a GPU job's profile would measure another
  // machine (and a large model for hours).
  if (options.device != contract::DeviceKind::kCpu || placement.device == "cuda") {
    return Status::InvalidArgument(
        "mitra profile measures segments on the CPU only, and this program computes on a GPU "
        "(--device cuda): give mitra run --nstages P (and --chunk-size) for a job on GPUs");
  }
  const int64_t batch =
      std::max<int64_t>(1, placement.global_batch.value_or(options.global_batch));
  Result<contract::ProfileRequest> request =
      contract::ProfileRequest::FromEnvironment(contract::ProcessEnvironment());
  if (!request.ok()) return request.status();
  Settings s;
  s.machines = request->machines;
  s.slots = request->slots;
  s.repeats = request->repeats;
  for (int64_t m : request->micro_batches) {
    if (m <= batch) s.micro_batches.push_back(m);
  }
  if (s.micro_batches.empty()) {
    return Status::InvalidArgument("every micro-batch size to profile exceeds the batch of " +
                                   std::to_string(batch) + ": give `mitra profile "
                                   "--micro-batches` sizes <= the batch");
  }
  int first = 0;
  for (size_t m = 0; m < s.slots.size(); ++m) {
    if (placement.rank < first + s.slots[m]) {
      s.machine = static_cast<int>(m);
      break;
    }
    first += s.slots[m];
  }
  std::sort(s.micro_batches.begin(), s.micro_batches.end());
  s.micro_batches.erase(std::unique(s.micro_batches.begin(), s.micro_batches.end()),
                        s.micro_batches.end());
  return s;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Heap bytes in use (the worker keeps large blocks in the heap: Trainer's malloc tuning).
int64_t HeapInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

int64_t Bytes(const Activations& acts) {
  int64_t n = 0;
  for (const auto& [name, t] : acts) n += static_cast<int64_t>(t.numel() * t.element_size());
  return n;
}

int64_t MemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    int64_t kb = 0;
    in >> kb;
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

// Inputs of a segment other than the first, as a stage receives them: leaves that need grad.
Activations AsReceived(const Activations& outputs) {
  Activations in;
  for (const auto& [name, t] : outputs) {
    torch::Tensor copy = t.detach().clone();
    if (copy.is_floating_point()) copy.requires_grad_(true);
    in.emplace(name, copy);
  }
  return in;
}

void Backward(const cutpoint::ModelSpec& spec, int segment, const Activations& outputs,
              const Activations& batch, double scale) {
  if (segment + 1 == spec.num_segments()) {
    (spec.loss(outputs, batch) * scale).backward();
    return;
  }
  std::vector<torch::Tensor> roots, grads;
  for (const auto& [name, t] : outputs) {
    if (t.is_floating_point() && t.requires_grad()) {
      roots.push_back(t);
      grads.push_back(torch::ones_like(t));
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads);
}

// Seconds to load one sample: the largest micro-batch collated, the median of `repeats`.
double SampleSeconds(const Dataset& dataset, const Settings& s) {
  const int64_t largest = s.micro_batches.back();
  std::vector<double> times;
  for (int r = 0; r < s.repeats; ++r) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < largest; ++i) indices.push_back((r * largest + i) % dataset.Size());
    const auto start = Clock::now();
    (void)Collate(dataset, indices);
    times.push_back(Seconds(start) / static_cast<double>(largest));
  }
  return Median(times);
}

// The sum of the last time of each segment: one pass over the chain.
double LastOfEach(const std::vector<std::vector<double>>& times) {
  double sum = 0;
  for (const std::vector<double>& t : times) sum += t.back();
  return sum;
}

// What the segments' median times are to be multiplied by to add up to the median pass.
double PassScale(const std::vector<std::vector<double>>& times, const std::vector<double>& passes) {
  double sum = 0;
  for (const std::vector<double>& t : times) sum += Median(t);
  return sum > 0 ? Median(passes) / sum : 1.0;
}

// Every segment's costs at micro-batch `size`, timed within passes over the whole chain, as a
// stage runs them: between two uses of a segment every other segment's weights and activations
// go through the caches, so a small micro-batch pays for fetching the weights as it does in
// training. Each cost is the segment's share (by its median) of the whole pass's median: on a
// machine whose CPU comes in slices (a quota, a noisy neighbour), a segment shorter than a slice
// is often timed inside one and looks fast, while a pass spans many. Leaves the last pass's
// gradients in the parameters.
std::vector<planner::SegmentCost> SegmentCosts(
    const cutpoint::ModelSpec& spec, const std::vector<std::shared_ptr<cutpoint::Segment>>& segments,
    const Dataset& dataset, int64_t size, int repeats) {
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < size; ++i) indices.push_back(i % dataset.Size());
  const Activations batch = Collate(dataset, indices);
  const int n = spec.num_segments();
  std::vector<std::vector<double>> forward(n), nograd(n), backward(n), weights(n);
  std::vector<int64_t> graph(n, 0), output_bytes(n, 0);
  std::vector<double> forward_pass, nograd_pass, backward_pass;  // each round's sum
  for (int r = 0; r <= repeats; ++r) {  // the first round warms up
    std::vector<Activations> outputs(n);
    Activations in = batch;
    for (int i = 0; i < n; ++i) {  // forward, keeping every graph
      if (i > 0) in = AsReceived(outputs[i - 1]);
      const int64_t heap = HeapInUse();
      const auto start = Clock::now();
      // Splittable, so that the backward is timed as its B and W (the sum: a whole backward).
      cutpoint::SplitBackward split;
      outputs[i] = segments[i]->Forward(in);
      if (r == 0) continue;
      forward[i].push_back(Seconds(start));
      graph[i] = std::max(graph[i], HeapInUse() - heap);
      output_bytes[i] = Bytes(outputs[i]);
    }
    for (int i = n - 1; i >= 0; --i) {  // backward, last segment first: B, then W
      cutpoint::WeightGradients w;
      const auto start = Clock::now();
      {
        cutpoint::DeferWeightGradients defer(&w);
        Backward(spec, i, outputs[i], batch, 1.0 / static_cast<double>(size));
      }
      const auto b_end = Clock::now();
      w.Run();
      if (r > 0) {
        backward[i].push_back(Seconds(start));
        weights[i].push_back(Seconds(b_end));
      }
    }
    torch::NoGradGuard no_grad;  // forward without graphs
    in = batch;
    for (int i = 0; i < n; ++i) {
      const auto start = Clock::now();
      in = segments[i]->Forward(in);
      if (r > 0) nograd[i].push_back(Seconds(start));
    }
    if (r > 0) {
      forward_pass.push_back(LastOfEach(forward));
      nograd_pass.push_back(LastOfEach(nograd));
      backward_pass.push_back(LastOfEach(backward));
    }
  }
  const double forward_scale = PassScale(forward, forward_pass);
  const double nograd_scale = PassScale(nograd, nograd_pass);
  const double backward_scale = PassScale(backward, backward_pass);
  std::vector<planner::SegmentCost> costs(n);
  for (int i = 0; i < n; ++i) {
    planner::SegmentCost& cost = costs[i];
    cost.micro_batch = size;
    cost.forward_s = Median(forward[i]) * forward_scale;
    cost.forward_nograd_s = Median(nograd[i]) * nograd_scale;
    cost.backward_s = Median(backward[i]) * backward_scale;
    // W is timed within the backward: the same scale.
    cost.weight_s = std::min(Median(weights[i]) * backward_scale, cost.backward_s);
    cost.output_bytes = output_bytes[i];
    cost.graph_bytes = std::max<int64_t>(graph[i], cost.output_bytes);
  }
  return costs;
}

// Each segment's parameters, buffers, optimizer state, and update: zeroing the gradients (at
// the step's start), their norm for clipping, the optimizer step; segment after segment, as the
// runtime does it over a stage. The gradients are those the segments' parameters hold.
void MeasureUpdates(const std::vector<std::shared_ptr<cutpoint::Segment>>& segments,
                    const RuntimeOptions& options, int repeats, planner::MachineProfile* m) {
  const int n = static_cast<int>(segments.size());
  std::vector<std::vector<torch::Tensor>> params(n), grads(n);
  std::vector<std::unique_ptr<Optimizer>> optimizers(n);
  for (int i = 0; i < n; ++i) {
    planner::SegmentProfile& seg = m->segments[i];
    seg.parameters = seg.parameter_bytes = seg.buffer_bytes = 0;
    for (const auto& p : segments[i]->parameters()) {
      params[i].push_back(p);
      grads[i].push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
      seg.parameters += p.numel();
      seg.parameter_bytes += p.numel() * p.element_size();
    }
    for (const auto& b : segments[i]->buffers()) {
      if (b.defined()) seg.buffer_bytes += b.numel() * b.element_size();
    }
    auto optimizer = MakeOptimizer(options.optimizer, params[i]);
    if (optimizer.ok()) optimizers[i] = std::move(optimizer).value();
  }
  std::vector<std::vector<double>> update(n);
  torch::NoGradGuard no_grad;
  for (int r = 0; r <= repeats; ++r) {
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < params[i].size(); ++k) {
        if (grads[i][k].defined()) params[i][k].mutable_grad() = grads[i][k].clone();
      }
    }
    for (int i = 0; i < n; ++i) {
      if (!optimizers[i] || params[i].empty()) continue;
      const auto start = Clock::now();
      double squared = 0;
      for (const auto& p : params[i]) {
        if (p.grad().defined()) squared += std::pow(p.grad().norm().item<double>(), 2);
      }
      optimizers[i]->Step(options.lr.base * (squared >= 0 ? 1 : 0));
      for (const auto& p : params[i]) {
        if (p.grad().defined()) p.mutable_grad().zero_();
      }
      if (r > 0) update[i].push_back(Seconds(start));
    }
  }
  for (int i = 0; i < n; ++i) {
    planner::SegmentProfile& seg = m->segments[i];
    seg.update_s = Median(update[i]);
    seg.optimizer_bytes = 0;
    if (!optimizers[i]) continue;
    for (const auto& p : params[i]) {
      for (const auto& [name, t] : optimizers[i]->State(p)) seg.optimizer_bytes += t.numel() * t.element_size();
    }
  }
}

// Step 1: every segment at every micro-batch size, this process alone on its machine.
planner::MachineProfile ProfileMachine(const cutpoint::ModelSpec& spec, const Dataset& dataset,
                                       const RuntimeOptions& options, const Settings& s) {
  planner::MachineProfile m;
  m.address = s.machines[s.machine];
  m.slots = s.slots[s.machine];
  m.memory_bytes = MemoryAvailable();
  m.sample_s = SampleSeconds(dataset, s);
  m.segments.resize(spec.num_segments());
  std::vector<std::shared_ptr<cutpoint::Segment>> segments;
  for (int i = 0; i < spec.num_segments(); ++i) {
    segments.push_back(cutpoint::BuildSegment(spec, i, options.seed));
    segments.back()->train(true);
    m.segments[i].name = spec.segments[i].name;
  }
  for (int64_t size : s.micro_batches) {
    const std::vector<planner::SegmentCost> costs =
        SegmentCosts(spec, segments, dataset, size, s.repeats);
    for (size_t i = 0; i < costs.size(); ++i) m.segments[i].costs.push_back(costs[i]);
  }
  MeasureUpdates(segments, options, s.repeats, &m);
  return m;
}

// The model's forward and backward at `size`, with every segment built once (step 2's load).
class Workload {
 public:
  Workload(const cutpoint::ModelSpec& spec, const Dataset& dataset, uint64_t seed, int64_t size)
      : spec_(spec), size_(size) {
    std::vector<int64_t> indices;
    for (int64_t i = 0; i < size; ++i) indices.push_back(i % dataset.Size());
    batch_ = Collate(dataset, indices);
    for (int i = 0; i < spec.num_segments(); ++i) segments_.push_back(cutpoint::BuildSegment(spec, i, seed));
  }
  int64_t size() const { return size_; }
  double Run(int repeats) {
    const auto start = Clock::now();
    for (int r = 0; r < repeats; ++r) {
      Activations acts = batch_;
      for (auto& segment : segments_) acts = segment->Forward(acts);
      (spec_.loss(acts, batch_) * (1.0 / static_cast<double>(size_))).backward();
      for (auto& segment : segments_) segment->zero_grad();
    }
    return Seconds(start);
  }
  // Iterations per second over a window of `window_s` seconds: it runs until an iteration ends
  // past the window (so that processes measuring together compete for the whole of it) and
  // counts those that ended within it (the first one when none did).
  double Rate(double window_s) {
    const auto start = Clock::now();
    int counted = 0;
    double counted_s = 0, elapsed = 0;
    do {
      Run(1);
      elapsed = Seconds(start);
      if (elapsed <= window_s || counted == 0) {
        ++counted;
        counted_s = elapsed;
      }
    } while (elapsed <= window_s);
    return counted / counted_s;
  }

 private:
  const cutpoint::ModelSpec& spec_;
  int64_t size_;
  Activations batch_;
  std::vector<std::shared_ptr<cutpoint::Segment>> segments_;
};

class Protocol {
 public:
  Protocol(Comm& comm, const Placement& placement) : comm_(comm), placement_(placement) {}

  void Barrier() {
    std::vector<torch::Tensor> one{torch::zeros({1})};
    comm_.Wait(comm_.global().allreduce(one), "the profile's barrier");
  }

  // Every rank's `mine`, by rank, on every rank.
  std::vector<double> Gather(double mine) {
    std::vector<torch::Tensor> all{torch::zeros({placement_.world_size()}, torch::kFloat64)};
    all[0][placement_.rank] = mine;
    comm_.Wait(comm_.global().allreduce(all), "the profile's all-reduce");
    return std::vector<double>(all[0].data_ptr<double>(),
                               all[0].data_ptr<double>() + placement_.world_size());
  }
  double Max(double mine) {
    const std::vector<double> all = Gather(mine);
    return *std::max_element(all.begin(), all.end());
  }
  bool Any(bool mine) { return Max(mine ? 1 : 0) > 0; }

  // One-way seconds of `bytes` between rank 0 and `peer`: half the median round trip (both
  // call it).
  double PingPong(int peer, int64_t bytes, int repeats, int tag) {
    std::vector<torch::Tensor> message{torch::zeros({std::max<int64_t>(1, bytes / 4)})};
    const bool first = placement_.rank == 0;
    std::vector<double> trips;
    for (int r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      if (first) {
        comm_.SendTensors(message, peer, tag + 2 * r);
        comm_.WaitSends();
        comm_.RecvTensors(message, peer, tag + 2 * r + 1, "the profile's messages");
      } else {
        comm_.RecvTensors(message, 0, tag + 2 * r, "the profile's messages");
        comm_.SendTensors(message, 0, tag + 2 * r + 1);
        comm_.WaitSends();
      }
      trips.push_back(Seconds(start));
    }
    return Median(trips) / 2;
  }

  // A message as a pipeline sends it: rank 0 sends it and goes on computing (`work`, twice),
  // `peer` has posted its receive ahead (Comm::ExpectActivations), computes (`work`, once) and
  // then waits for it. Every repeat's message has the same tag and shape, as a step's message
  // has the last step's; the first, which the receive could not yet post ahead in full, is left
  // out. Gloo moves the data once both sides have posted it, and a busy machine moves it more
  // slowly than an idle one. The medians, which every rank learns: the seconds of the peer's
  // wait, and of rank 0's send call (which writes the message, its receive being posted).
  struct Busy {
    double wait_s = 0, send_s = 0;
  };
  Busy BusyTransfer(int peer, int64_t bytes, int repeats, int tag, const std::function<void()>& work) {
    const cutpoint::Activations message{{"x", torch::zeros({std::max<int64_t>(1, bytes / 4)})}};
    std::vector<double> waits, sends;
    for (int r = 0; r <= repeats; ++r) {
      if (placement_.rank == peer) comm_.ExpectActivations(0, tag);
      Barrier();
      if (placement_.rank == 0) {
        const auto start = Clock::now();
        comm_.SendActivations(message, peer, tag);
        if (r > 0) sends.push_back(Seconds(start));
        work();
        work();
        comm_.WaitSends();
      } else if (placement_.rank == peer) {
        work();
        const auto start = Clock::now();
        (void)comm_.RecvActivations(0, tag);
        if (r > 0) waits.push_back(Seconds(start));
      }
    }
    std::vector<torch::Tensor> total{torch::tensor(
        {placement_.rank == peer ? Median(waits) : 0.0, placement_.rank == 0 ? Median(sends) : 0.0},
        torch::kFloat64)};
    comm_.Wait(comm_.global().allreduce(total), "the profile's all-reduce");
    return {total[0][0].item<double>(), total[0][1].item<double>()};
  }

  // An all-reduce of `bytes` started as every process starts computing (`work`), as the
  // data-parallel buckets start during the last backward: how much longer than `work` alone
  // (`alone` seconds) it takes until the all-reduce is done (the median), on rank 0 as on all.
  double AllreduceDuringWork(int64_t bytes, int repeats, double alone,
                             const std::function<void()>& work) {
    std::vector<double> extra;
    std::vector<torch::Tensor> data{torch::zeros({std::max<int64_t>(1, bytes / 4)})};
    for (int r = 0; r <= repeats; ++r) {
      Barrier();
      const auto start = Clock::now();
      auto pending = comm_.global().allreduce(data);
      work();
      comm_.Wait(pending, "the profile's all-reduce");
      if (r > 0) extra.push_back(std::max(0.0, Seconds(start) - alone));
    }
    return Median(extra);
  }

  // The step's small all-reduce (24 bytes) right after every process computed (`work`).
  // The step's small all-reduce right after every process did `work`: as the last process to
  // finish its work sees it, which waits for no one (every other one's time includes its wait
  // for the slowest, on machines that differ most of it). The median over `repeats`.
  double SyncAfterWork(int repeats, const std::function<void()>& work) {
    std::vector<double> times;
    std::vector<torch::Tensor> data{torch::zeros({3}, torch::kFloat64)};
    for (int r = 0; r <= repeats; ++r) {
      Barrier();
      work();
      const auto start = Clock::now();
      comm_.Wait(comm_.global().allreduce(data), "the profile's all-reduce");
      if (r > 0) times.push_back(Seconds(start));
    }
    std::vector<double> last;
    for (const double mine : times) {
      const std::vector<double> all = Gather(mine);
      last.push_back(*std::min_element(all.begin(), all.end()));
    }
    return Median(last);
  }

  double Allreduce(int64_t bytes, int repeats) {
    std::vector<double> times;
    std::vector<torch::Tensor> data{torch::zeros({std::max<int64_t>(1, bytes / 4)})};
    for (int r = 0; r <= repeats; ++r) {
      Barrier();
      const auto start = Clock::now();
      comm_.Wait(comm_.global().allreduce(data), "the profile's all-reduce");
      if (r > 0) times.push_back(Seconds(start));
    }
    return Median(times);
  }

 private:
  Comm& comm_;
  const Placement& placement_;
};

// The CPUs this process may run on (its affinity), which its machine's processes share.
int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

// Rounds of a sharing measurement, and measurements of one k before an impossible figure is
// replaced by its bound (planner/sharing.h).
constexpr int kSharingRounds = 3;
constexpr int kSharingAttempts = 3;

// MachineProfile::speed of this rank's machine, measured by all of the job's ranks together
// (each machine's first `k` processes compute, every one measuring its own rate; the others
// wait). Machines measure at once: they share no CPU.
std::vector<double> MeasureSharing(Protocol& protocol, Workload& load, const Settings& s,
                                   int first, int rank) {
  const int slots = s.slots[s.machine];
  const int most = *std::max_element(s.slots.begin(), s.slots.end());
  const int cores = UsableCpus();
  const bool leader = rank == first;
  // Each window holds at least 3 iterations of the slowest process alone.
  const auto start = Clock::now();
  load.Run(1);
  const double window = std::max(0.25, 3 * protocol.Max(Seconds(start)));
  double alone_rate = 0;
  std::vector<double> speeds;
  for (int k = 1; k <= most; ++k) {
    const bool computes = rank - first < k && k <= slots;
    const int measured = std::min(k, slots);  // this machine's processes that compute
    double speed = 1;
    std::string impossible;
    for (int attempt = 0; attempt < kSharingAttempts; ++attempt) {
      std::vector<std::vector<double>> rounds;
      for (int r = 0; r < kSharingRounds; ++r) {
        protocol.Barrier();
        const std::vector<double> rates = protocol.Gather(computes ? load.Rate(window) : 0);
        rounds.emplace_back(rates.begin() + first, rates.begin() + first + measured);
      }
      if (k == 1) {
        std::vector<double> alone;
        for (const auto& round : rounds) alone.push_back(round[0]);
        alone_rate = Median(alone);
      }
      if (k <= slots) {
        speed = k == 1 ? 1.0 : planner::SharedSpeed(rounds, alone_rate);
        impossible =
            planner::ImpossibleSharing(speed, k, cores, speeds.empty() ? 1.0 : speeds.back());
        if (leader && !impossible.empty()) {
          spdlog::warn("{} with {} computing: impossible figure, measuring again: {}",
                       s.machines[s.machine], k, impossible);
        }
      }
      if (!protocol.Any(!impossible.empty())) break;
    }
    if (k > slots) continue;
    if (!impossible.empty()) {
      speed = planner::BoundedSharing(k, cores, speeds.empty() ? 1.0 : speeds.back());
      if (leader) {
        spdlog::warn("{} with {} computing: no possible figure in {} measurements; using the "
                     "fastest possible, {:.2f}", s.machines[s.machine], k, kSharingAttempts, speed);
      }
    }
    speeds.push_back(speed);
  }
  if (leader) {
    spdlog::info("{}: {} CPUs; speed per process with 1..{} computing: {:.3f}",
                 s.machines[s.machine], cores, slots, fmt::join(speeds, ", "));
  }
  return speeds;
}

// Step 3's message sizes, 1 KiB to 8 MiB.
const std::vector<int64_t> kMessageSizes = {1 << 10, 1 << 14, 1 << 16, 1 << 18,
                                            1 << 20, 1 << 22, 1 << 23};

// Step 3a: rank 0 and the first process of every other machine (and its own machine's second,
// when it has one) ping-pong every size, idle and while `small` computes: the links rank 0
// keeps. Every rank takes part in the barriers; collective, throws PeerError.
std::vector<planner::LinkProfile> MeasureLinks(Protocol& protocol, const Settings& s, int rank,
                                               Workload& small) {
  std::vector<std::pair<int, int>> peers;  // rank, machine
  if (s.slots[0] > 1) peers.emplace_back(1, 0);
  for (int m = 1, r = s.slots[0]; m < static_cast<int>(s.slots.size()); r += s.slots[m], ++m) {
    peers.emplace_back(r, m);
  }
  std::vector<planner::LinkProfile> links;
  int tag = 1000;
  for (const auto& [peer, peer_machine] : peers) {
    planner::LinkProfile link;
    link.from = s.machines[0];
    link.to = s.machines[peer_machine];
    for (int64_t bytes : kMessageSizes) {
      protocol.Barrier();
      double seconds = 0;
      if (rank == 0 || rank == peer) {
        protocol.PingPong(peer, bytes, 1, tag);  // warm-up
        seconds = protocol.PingPong(peer, bytes, s.repeats, tag + 2);
      }
      tag += 2 * s.repeats + 4;
      link.samples.emplace_back(bytes, seconds);
      const auto busy =
          protocol.BusyTransfer(peer, bytes, s.repeats, tag, [&] { small.Run(1); });
      tag += s.repeats + 1;
      link.busy_samples.emplace_back(bytes, busy.wait_s);
      link.send_samples.emplace_back(bytes, busy.send_s);
    }
    std::tie(link.latency_s, link.bytes_per_s) = planner::FitLatencyBandwidth(link.samples);
    link.busy_latency_s = planner::BusyLatency(link);
    std::tie(link.send_latency_s, link.send_bytes_per_s) =
        planner::FitLatencyBandwidth(link.send_samples);
    links.push_back(link);
  }
  return links;
}

// Step 3b: the all-reduce over all `world` processes, idle by size and started as every process
// starts `small`, and the step's small all-reduce right after computing, into `out`.
// Collective, throws PeerError.
void MeasureCollectives(Protocol& protocol, const Settings& s, int world, Workload& small,
                        planner::CommProfile* out) {
  planner::AllreduceProfile all;
  all.group = world;
  for (int64_t bytes : kMessageSizes) {
    all.samples.emplace_back(bytes, protocol.Allreduce(bytes, s.repeats));
  }
  std::tie(all.latency_s, all.bytes_per_s) = planner::FitLatencyBandwidth(all.samples);
  std::vector<double> alone_times;
  for (int r = 0; r < s.repeats; ++r) {
    protocol.Barrier();
    const auto start = Clock::now();
    small.Run(1);
    alone_times.push_back(Seconds(start));
  }
  const double alone = Median(alone_times);
  for (int64_t bytes : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 23}) {
    all.busy_samples.emplace_back(
        bytes, protocol.AllreduceDuringWork(bytes, s.repeats, alone, [&] { small.Run(1); }));
  }
  out->allreduce.push_back(all);
  out->step_sync_s = protocol.SyncAfterWork(2 * s.repeats, [&] { small.Run(1); });
}

// Step 4: training steps of the runtime itself. The first kCalibrationWarmUpSteps warm up
// (allocations, the first buckets); the median of the next kCalibrationSteps is kept. Each
// replica trains kCalibrationMicroBatches micro-batches a step, as a job of several does.
constexpr int kCalibrationWarmUpSteps = 2;
constexpr int kCalibrationSteps = 6;
constexpr int kCalibrationMicroBatches = 2;

// The seconds this rank computes in a training step of the runtime, every rank of the profile
// at once as the replicas of one data-parallel shape (1 x world) of micro-batches of `size`:
// the median of the steps' compute (StepResult::compute_s; the waits for peers left out). The
// runtime meets on a store of its own, on a port rank 0 picks. 0 when the steps could not be
// set up (the reason is logged, the same on every rank); throws PeerError.
double RuntimeComputeSeconds(const cutpoint::ModelSpec& spec,
                             const std::shared_ptr<const Dataset>& dataset,
                             const RuntimeOptions& options, const Placement& placement,
                             Protocol& protocol, int64_t size) {
  double port = 0;
  if (placement.rank == 0) {
    Result<int> picked = PickFreeTcpPort(placement.rdzv_host);
    if (picked.ok()) {
      port = *picked;
    } else {
      spdlog::warn("no port for the profile's training steps: {}", picked.status().message());
    }
  }
  port = protocol.Gather(port)[0];
  if (port <= 0) return 0;
  const int world = placement.world_size();
  Placement steps = placement;
  steps.stage_map = contract::StageMap::Default(1, world);
  steps.chunk_size = static_cast<int>(size);
  steps.global_batch = world * size * kCalibrationMicroBatches;
  steps.rdzv_port = static_cast<int>(port);
  steps.generation = placement.generation + 1;
  steps.heartbeat_s = 0;
  steps.schedule = "1f1b";
  steps.recompute = 0;
  steps.partition = std::to_string(spec.num_segments());
  steps.zero = 0;
  steps.park = false;
  RuntimeOptions quiet = options;  // no trace files of these steps
  quiet.trace_path.clear();
  quiet.sample_trace.clear();
  Result<std::unique_ptr<Runtime>> runtime = Runtime::Create(spec, dataset, steps, quiet);
  if (!runtime.ok()) {
    spdlog::warn("the profile's training steps could not be set up, so the speeds stay as the "
                 "workload measured them: {}", runtime.status().message());
    return 0;
  }
  std::vector<double> compute;
  for (int64_t step = 0; step < kCalibrationWarmUpSteps + kCalibrationSteps; ++step) {
    const StepResult result = (*runtime)->Step(step);
    if (step >= kCalibrationWarmUpSteps) compute.push_back(result.compute_s);
  }
  return Median(compute);
}

// What `m`'s costs say one process computes alone in a step of RuntimeComputeSeconds: its
// micro-batches' forward and backward through every segment and their samples' loading, and
// the update. `size` is one of the profiled sizes.
double AloneStepSeconds(const planner::MachineProfile& m, int64_t size) {
  double micro_batch = m.sample_s * static_cast<double>(size), update = 0;
  for (const planner::SegmentProfile& segment : m.segments) {
    for (const planner::SegmentCost& cost : segment.costs) {
      if (cost.micro_batch == size) micro_batch += cost.forward_s + cost.backward_s;
    }
    update += segment.update_s;
  }
  return kCalibrationMicroBatches * micro_batch + update;
}

// A machine whose training steps compute this much longer than its segments' figures say does
// not sustain the speed its short measurements saw (a CPU quota, a burstable VM, a busy
// neighbour): its figures are scaled to the steps. Below it, the gap is the job's communication
// sharing the cores, which MeasureSharing's calibration covers on machines of several slots.
constexpr double kSustainedSpeedTolerance = 1.2;

// Step 4 on the machine's leader, from the median compute `step_s` of its processes' training
// steps of `size` micro-batches: on a machine of several slots the speed with all of them
// computing moves to the steps' (CalibratedSharing); a machine of one slot whose steps are
// slower than its figures beyond kSustainedSpeedTolerance has its figures scaled to them.
void CalibrateToSteps(planner::MachineProfile& machine, const std::vector<double>& workload_speed,
                      const Settings& s, int64_t size, double step_s) {
  const std::string& name = s.machines[s.machine];
  const double alone_s = AloneStepSeconds(machine, size);
  if (!(step_s > 0) || !(alone_s > 0)) return;
  if (s.slots[s.machine] > 1) {
    const double measured = alone_s / step_s;
    machine.speed = planner::CalibratedSharing(workload_speed, measured, UsableCpus());
    spdlog::info("{}: speed per process with {} computing: {:.3f} in the workload, {:.3f} in "
                 "training steps of the runtime; the profile keeps {:.3f}",
                 name, s.slots[s.machine], workload_speed.back(), measured, machine.speed.back());
    return;
  }
  const double factor = step_s / alone_s;
  if (factor <= kSustainedSpeedTolerance) return;
  planner::ScaleCompute(machine, factor);
  spdlog::info("{}: training steps of the runtime computed {:.2f} times what its segments "
               "measured alone: it does not sustain that speed, and the profile keeps its "
               "figures {:.2f} times slower", name, factor, factor);
}

}  // namespace

int RunProfile(const cutpoint::ModelSpec& spec, const std::shared_ptr<const Dataset>& data,
               const RuntimeOptions& options, const Placement& placement) {
  const Dataset& dataset = *data;
  auto settings = ReadSettings(placement, options);
  if (!settings.ok()) {
    spdlog::error("{}", settings.status().message());
    return 2;
  }
  const Settings& s = *settings;
  std::unique_ptr<Comm> comm = Comm::Connect(placement, options.backend);  // throws PeerError
  Protocol protocol(*comm, placement);
  const int world = placement.world_size();
  int first = 0;  // this machine's first rank
  for (int m = 0; m < s.machine; ++m) first += s.slots[m];
  const bool leader = placement.rank == first;

  // 1. Compute, one process per machine.
  planner::MachineProfile machine;
  protocol.Barrier();
  if (leader) {
    spdlog::info("profiling {} segments at micro-batches {} on {}", spec.num_segments(),
                 fmt::join(s.micro_batches, ","), s.machines[s.machine]);
    machine = ProfileMachine(spec, dataset, options, s);
  }
  protocol.Barrier();

  // 2. The speed of each process while k of a machine's processes compute.
  Workload load(spec, dataset, options.seed, s.micro_batches[s.micro_batches.size() / 2]);
  load.Run(1);  // warm-up
  const std::vector<double> speed = MeasureSharing(protocol, load, s, first, placement.rank);
  if (leader) machine.speed = speed;
  protocol.Barrier();

  // 3. Messages and collectives, a small workload keeping the cores busy where asked.
  Workload small(spec, dataset, options.seed, s.micro_batches.front());
  small.Run(1);
  planner::CommProfile comm_profile;
  comm_profile.links = MeasureLinks(protocol, s, placement.rank, small);
  if (world > 1) MeasureCollectives(protocol, s, world, small, &comm_profile);
  protocol.Barrier();

  // 4. Each machine's speed in the runtime's own training steps, every process at once: how
  // they share the cores (planner/sharing.h), and whether a machine sustains its figures.
  if (world > 1) {
    const std::vector<double> all = protocol.Gather(
        RuntimeComputeSeconds(spec, data, options, placement, protocol, load.size()));
    const std::vector<double> mine(all.begin() + first, all.begin() + first + s.slots[s.machine]);
    if (leader) CalibrateToSteps(machine, speed, s, load.size(), Median(mine));
  }

  if (leader) {
    Emit(contract::message::ProfileMachine{s.machine, {planner::MachineProfileJson(machine)}});
  }
  if (placement.rank == 0) {
    Emit(contract::message::ProfileComm{{planner::CommProfileJson(comm_profile)}});
  }
  comm->WaitSends();
  return 0;
}

}  // namespace mitra::worker
