// Sharing: how fast each of a machine's processes computes while k of them compute at once
// (MachineProfile::speed), from what `mitra profile` measured.
//
// Each of the k processes measures its own rate (iterations of a training workload per second)
// over the same window of time. A round's figure is the mean of the k rates over the rate of one
// process alone; the estimate is the median of the rounds' figures. So neither one process that
// happened to get a core to itself nor one round another program disturbed decides it.
//
// Some figures no machine can produce, and they are refused (then measured again): a process
// faster than alone, k processes doing more than `cores` processes' worth of work together,
// or a process faster than with one competitor fewer. `kSharingTolerance` is the margin for
// timing noise.
//
// The workload is the model alone; a job's processes also share the cores with their
// communication (Gloo's threads wake for every message and every bucket of gradients), and on
// some machines that costs each process a tenth of its speed and more where the workload saw
// none. So the profile ends with training steps of the runtime itself, every process at once,
// and CalibratedSharing moves the speeds to what they measured. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace mitra::planner {

// A figure may exceed a bound by this fraction before it is refused: a round's windows start
// at one barrier, but a rate counts whole iterations (at least 3 in a window) and processes
// reach the window's end mid-iteration; the figures of five profiles spread by up to 0.052
// (bench/profile_sharing.py, docs/performance.md).
inline constexpr double kSharingTolerance = 0.1;

// The speed of each of k processes computing at once: the median over `rounds` (each holds the
// k processes' rates) of their mean rate divided by `alone_rate`. 0 without rounds.
double SharedSpeed(const std::vector<std::vector<double>>& rounds, double alone_rate);

// Why `speed` (with k processes computing, k >= 1) is impossible on a machine with `cores` CPUs
// when `fewer` is the speed with k - 1 (1 for k = 1); "" when it is possible.
std::string ImpossibleSharing(double speed, int k, int cores, double fewer);

// The figure used when measuring again gave no possible one: the fastest possible,
// min(fewer, cores / k, 1).
double BoundedSharing(int k, int cores, double fewer);

// `speeds` (speed[k - 1] with k = 1 .. slots computing, as the workload measured them) moved to
// `measured` with all `slots` computing, as training steps of the runtime measured it: speed[k - 1]
// is multiplied by (measured / speeds.back()) ^ ((k - 1) / (slots - 1)), so one process alone
// stays at 1 and the factor grows with the processes that share the cores (their
// communication does). Each figure is then held to BoundedSharing's bound. `speeds` unchanged
// when it holds one figure or `measured` is not a positive number.
std::vector<double> CalibratedSharing(const std::vector<double>& speeds, double measured,
                                      int cores);

}  // namespace mitra::planner
