// Stragglers: ranks whose steps take well more compute than their stage peers'.
//
// Every rank's heartbeat carries the mean compute and wait time of its steps since the previous
// one (docs/worker-contract.md). In a synchronous job a slow rank holds back every step: its
// peers wait for it in the data-parallel reduction, so their wait grows while their compute
// stays. A rank whose mean compute is at least `ratio` x the median of its stage peers' latest
// means, over `steps` steps in a row, is a straggler; each is reported once per generation.
// Ranks of the same stage run the same segments, so they are the fair comparison, each against
// the work it was given: where the plan expects ranks to differ (uneven shares of the batch,
// machines the profile found slower), a rank's compute is divided by what the plan expected of
// it, so a straggler is a rank slower than planned next to its peers. A stage with one replica
// has no peers and is never judged.
//
// Pure and single-threaded: the run loop feeds it and decides what a finding leads to.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace mitra::manager {

struct StragglerOptions {
  double ratio = 1.3;
  int steps = 20;
};

struct Straggler {
  int rank = 0;
  int stage = 0;
  double compute_s = 0;      // its mean compute per step, in the heartbeat that decided
  double peer_median_s = 0;  // what its stage peers' median pace gives for its own work
  double ratio = 0;          // compute_s / peer_median_s
  int steps = 0;             // the steps in a row it was that slow
};

class StragglerDetector {
 public:
  // `stage_of_rank[r]`: the stage of rank r in the generation being watched;
  // `expected_of_rank[r]`: the compute the plan expects of it a step, in any unit (seconds
  // predicted, micro-batches), empty when the plan expects alike of every rank of a stage.
  StragglerDetector(StragglerOptions options, std::vector<int> stage_of_rank,
                    std::vector<double> expected_of_rank = {});

  // Rank `rank` reports `steps` steps of `compute_s` mean compute each. Returns the finding the
  // first time the rank is a straggler in this generation. Ranks outside the generation are
  // ignored.
  std::optional<Straggler> Observe(int rank, int steps, double compute_s);

  // The stage of `rank` (-1 outside the generation).
  int StageOf(int rank) const {
    return rank >= 0 && rank < static_cast<int>(stage_of_rank_.size()) ? stage_of_rank_[rank] : -1;
  }

 private:
  struct RankTimes {
    double compute_s = -1;  // the latest mean over the expected; < 0 until the first report
    double expected = 1;    // what the plan expects of it a step
    int slow_steps = 0;     // in a row at >= ratio x the peers' median
    bool reported = false;
  };
  // The median of the latest means of `rank`'s stage peers; nullopt while none has reported.
  std::optional<double> PeerMedian(int rank);

  StragglerOptions options_;
  std::vector<int> stage_of_rank_;
  std::vector<std::vector<int>> ranks_of_stage_;
  std::vector<RankTimes> ranks_;
  std::vector<double> scratch_;
};

}  // namespace mitra::manager
