// The stage-to-rank map, in Varuna's format, parsed and produced in one place: the manager
// writes it (MITRA_STAGE_TO_RANK_MAP) and the worker reads it.
//
// "0,2;1,3;" means: stage 0 is held by ranks 0 and 2, stage 1 by ranks 1 and 3 (stage-major,
// ';' after each stage). Position within a stage's list is the replica index, so rank 2 is
// (stage 0, replica 1). The default layout for P stages and D replicas puts stage s on ranks
// s, s+P, s+2P, ...: the ranks of one pipeline are consecutive.
//
// "PxD" ("2x3") is the default layout of P stages and D replicas in a few bytes. The manager
// writes it only where the listed form would be longer than kLongestListedText (a job of about
// 15,000 ranks and more), because Linux caps one environment string at 128 KiB.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::contract {

struct GridPosition {
  int stage = 0;
  int replica = 0;
};

// Immutable: copies share one map and its text (a job of 10,000 ranks hands the same map to
// every rank's environment), so a copy and ToString() cost O(1).
class StageMap {
 public:
  static constexpr size_t kLongestListedText = 64 * 1024;

  // The default layout of P stages x D replicas; its text lists the ranks up to
  // kLongestListedText bytes, beyond that it reads "PxD".
  static StageMap Default(int num_stages, int num_replicas);
  // Parses Varuna's format, where every rank 0..world-1 must appear exactly once and every stage
  // must hold the same number of ranks, or "PxD".
  static Result<StageMap> Parse(const std::string& text);

  const std::string& ToString() const { return data_->text; }
  int num_stages() const { return static_cast<int>(ranks().size()); }
  int num_replicas() const { return ranks().empty() ? 0 : static_cast<int>(ranks()[0].size()); }
  int world_size() const { return num_stages() * num_replicas(); }

  int RankOf(int stage, int replica) const { return ranks().at(stage).at(replica); }
  GridPosition PositionOf(int rank) const;             // rank must be in the map
  const std::vector<int>& RanksOfStage(int stage) const { return ranks().at(stage); }

 private:
  struct Data {
    std::vector<std::vector<int>> ranks;  // ranks[stage][replica]
    std::string text;                     // Varuna's format
  };
  explicit StageMap(std::vector<std::vector<int>> ranks);
  StageMap(std::vector<std::vector<int>> ranks, std::string text);
  const std::vector<std::vector<int>>& ranks() const { return data_->ranks; }

  std::shared_ptr<const Data> data_;
};

}  // namespace mitra::contract
