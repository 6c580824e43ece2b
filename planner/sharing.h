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
// timing noise. Pure functions.
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

}  // namespace mitra::planner
