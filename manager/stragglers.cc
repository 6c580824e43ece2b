#include "manager/stragglers.h"

#include <algorithm>
#include <utility>

#include "common/median.h"

namespace mitra::manager {

StragglerDetector::StragglerDetector(StragglerOptions options, std::vector<int> stage_of_rank,
                                     std::vector<double> expected_of_rank)
    : options_(options), stage_of_rank_(std::move(stage_of_rank)), ranks_(stage_of_rank_.size()) {
  for (size_t r = 0; r < stage_of_rank_.size(); ++r) {
    if (r < expected_of_rank.size() && expected_of_rank[r] > 0) {
      ranks_[r].expected = expected_of_rank[r];
    }
    const int stage = stage_of_rank_[r];
    if (stage < 0) continue;
    if (ranks_of_stage_.size() <= static_cast<size_t>(stage)) ranks_of_stage_.resize(stage + 1);
    ranks_of_stage_[stage].push_back(static_cast<int>(r));
  }
}

std::optional<double> StragglerDetector::PeerMedian(int rank) {
  scratch_.clear();
  for (const int peer : ranks_of_stage_[stage_of_rank_[rank]]) {
    if (peer != rank && ranks_[peer].compute_s >= 0) scratch_.push_back(ranks_[peer].compute_s);
  }
  if (scratch_.empty()) return std::nullopt;
  return MedianInPlace(scratch_);
}

std::optional<Straggler> StragglerDetector::Observe(int rank, int steps, double compute_s) {
  if (StageOf(rank) < 0 || steps <= 0 || compute_s < 0) {
    return std::nullopt;
  }
  RankTimes& times = ranks_[rank];
  times.compute_s = compute_s / times.expected;
  const std::optional<double> median = PeerMedian(rank);
  if (!median || *median <= 0 || times.compute_s < options_.ratio * *median) {
    times.slow_steps = 0;
    return std::nullopt;
  }
  times.slow_steps += steps;
  if (times.reported || times.slow_steps < options_.steps) return std::nullopt;
  times.reported = true;
  return Straggler{rank, stage_of_rank_[rank], compute_s, *median * times.expected,
                   times.compute_s / *median, times.slow_steps};
}

}  // namespace mitra::manager
