// Profile: what one training program costs on the machines of a list, as `mitra profile`
// measures it and the simulator and planner read it (docs/planner.md).
//
// Per machine (one process alone on it): every segment's forward, forward without autograd,
// backward and update time at each profiled micro-batch size, its activation bytes at the cut
// after it and the memory its forward keeps for the backward, its parameter, buffer and
// optimizer-state bytes; the time to load a sample; and how fast each process runs when k of
// the machine's processes compute at once (a machine's cores are shared). Between machines and
// within one: point-to-point latency and bandwidth. Across processes: all-reduce time by bytes.
//
// Costs at a micro-batch size that was not profiled are interpolated linearly between the two
// nearest profiled sizes (extrapolated from the two nearest at the ends): compute and memory are
// close to affine in the micro-batch size. Plain data, thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::planner {

// One segment at one micro-batch size, measured alone on a machine.
struct SegmentCost {
  int64_t micro_batch = 0;
  double forward_s = 0;         // keeping the autograd graph
  double forward_nograd_s = 0;  // without it (a forward whose activations are discarded)
  double backward_s = 0;        // from its output's gradients (the last segment: from its loss)
  int64_t output_bytes = 0;     // the activations it hands on (what a stage boundary after it sends)
  int64_t graph_bytes = 0;      // memory its forward keeps until the backward
  double weight_s = 0;          // of backward_s, what a zero-bubble schedule's W computes (the
                                // weight gradients of cutpoint::Linear layers); 0 in profiles
                                // written before it was measured
};

struct SegmentProfile {
  std::string name;
  int64_t parameters = 0;       // elements
  int64_t parameter_bytes = 0;
  int64_t buffer_bytes = 0;
  int64_t optimizer_bytes = 0;  // optimizer state after a step
  double update_s = 0;          // zeroing, clipping and the optimizer step over its parameters
  std::vector<SegmentCost> costs;  // ascending micro-batch sizes
};

struct MachineProfile {
  std::string address;
  int slots = 1;
  int64_t memory_bytes = 0;  // available to the workers of the machine, together
  double sample_s = 0;       // loading one sample (a first and a last stage load each one)
  // speed[k - 1]: each computing process's speed relative to one alone, while k of the
  // machine's processes compute at once (speed[0] = 1).
  std::vector<double> speed;
  std::vector<SegmentProfile> segments;  // in model order

  // Speed with `k` processes computing; beyond the measured k, the last value scaled by the
  // share of the cores (measured k / k).
  double SpeedAt(int k) const;
};

// Every compute figure of `m` (forwards, backwards, updates, sample loads) times `factor`: a
// machine found that much slower with one process computing.
void ScaleCompute(MachineProfile& m, double factor);

// Point-to-point messages between two machines (`from` == `to`: within one machine).
struct LinkProfile {
  std::string from, to;
  double latency_s = 0;
  double bytes_per_s = 0;
  std::vector<std::pair<int64_t, double>> samples;  // bytes, one-way seconds (measured)
  // As a pipeline uses the link: both processes compute, the receiver then asks for a message
  // while the sender still computes; seconds from asking to having it. On a machine whose cores
  // are all busy this is dominated by when the processes' communication threads get a core,
  // whatever the size: busy_latency_s is the median of the samples less their transfer at the
  // idle bandwidth (BusyLatency). 0 when not measured (then the idle figures apply).
  double busy_latency_s = 0;
  std::vector<std::pair<int64_t, double>> busy_samples;
  // The sender's side of the same: the seconds its send call takes (the receive was posted
  // ahead, so the send writes the message itself), fitted as send_latency_s + bytes /
  // send_bytes_per_s. Not measured (send_bytes_per_s 0): a send costs its caller nothing.
  std::vector<std::pair<int64_t, double>> send_samples;
  double send_latency_s = 0;
  double send_bytes_per_s = 0;
};

// All-reduce over `group` processes: time = latency_s + bytes / bytes_per_s, fitted to samples.
struct AllreduceProfile {
  int group = 0;
  double latency_s = 0;
  double bytes_per_s = 0;
  std::vector<std::pair<int64_t, double>> samples;
  // Started as every process starts computing, as the data-parallel buckets start during the
  // last backward: how much later than the computation alone the all-reduce is done (on busy
  // cores the two slow each other down). Empty when not measured.
  std::vector<std::pair<int64_t, double>> busy_samples;
};

struct Profile {
  static constexpr int kFormat = 1;
  std::string program;
  std::vector<std::string> program_args;
  std::vector<int64_t> micro_batches;  // profiled sizes, ascending
  std::vector<MachineProfile> machines;
  std::vector<LinkProfile> links;
  std::vector<AllreduceProfile> allreduce;  // by group size, ascending
  // The step's small all-reduce (loss, norm, stop) over every process, as the last process to
  // finish computing sees it (the others' times include their wait for it).
  double step_sync_s = 0;

  // JSON as written by `mitra profile` (profile.json). InvalidArgument names what is wrong.
  static Result<Profile> FromJson(const std::string& text, const std::string& where);
  std::string ToJson() const;  // pretty-printed
  // One row per machine, segment and micro-batch size, for spreadsheets.
  std::string SegmentsCsv() const;

  int num_segments() const;
  // The machine profiled under `address`, or the first one (the list's typical machine) when
  // it was not profiled.
  const MachineProfile& Machine(const std::string& address) const;
  // Segment `segment`'s costs on `machine` at micro-batch size `micro_batch`.
  SegmentCost CostAt(const MachineProfile& machine, int segment, int64_t micro_batch) const;
  // A message between two machines (or within one): the link measured between them, else one
  // of the same kind, else any. `busy`: while the sender computes (LinkProfile::busy_*).
  double P2pSeconds(const std::string& from, const std::string& to, int64_t bytes,
                    bool busy = false) const;
  // What sending such a message takes the sender (LinkProfile::send_*): 0 when not measured.
  double SendSeconds(const std::string& from, const std::string& to, int64_t bytes) const;
  // All-reduce of `bytes` over `group` processes (1: free). Group sizes beyond the profiled ones
  // follow a ring all-reduce: 2 (g - 1) / g of the data crosses each link.
  double AllreduceSeconds(int group, int64_t bytes) const;
  // What an all-reduce of `bytes` started with the last backward adds after it (the busy
  // samples of the nearest measured group, interpolated); -1 when not measured.
  double AllreduceAfterCompute(int group, int64_t bytes) const;
};

// What `mitra profile` gathers from the workers: each machine's part (from its first process)
// and the communication figures (from rank 0), as JSON.
struct CommProfile {
  std::vector<LinkProfile> links;
  std::vector<AllreduceProfile> allreduce;
  double step_sync_s = 0;
};
std::string MachineProfileJson(const MachineProfile& machine);
Result<MachineProfile> ParseMachineProfile(const std::string& text);
std::string CommProfileJson(const CommProfile& comm);
Result<CommProfile> ParseCommProfile(const std::string& text);

// The median of a link's busy samples less their transfer at its idle bandwidth.
double BusyLatency(const LinkProfile& link);

// Least squares fit of seconds = latency + bytes / bandwidth; latency >= 0.
std::pair<double, double> FitLatencyBandwidth(const std::vector<std::pair<int64_t, double>>& samples);

}  // namespace mitra::planner
