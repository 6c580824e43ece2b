#include "manager/state_placement.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>

namespace mitra::manager {
namespace {

// "5,5" -> {5, 5}; nullopt unless `stages` counts of at least 1 that add up to `segments`.
std::optional<std::vector<int>> StageCounts(const std::string& partition, int stages,
                                           int segments) {
  std::vector<int> counts;
  std::stringstream in(partition);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < 1) return std::nullopt;
      counts.push_back(n);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (static_cast<int>(counts.size()) != stages ||
      std::accumulate(counts.begin(), counts.end(), 0) != segments) {
    return std::nullopt;
  }
  return counts;
}

// What of `need` a worker holding `held` keeps, weighed.
int64_t KeptWeight(const HeldSegments& held, const HeldSegments& need,
                   const std::vector<int64_t>& weights) {
  int64_t kept = 0;
  for (int i = std::max(held.first, need.first); i < std::min(held.end, need.end); ++i) {
    kept += weights.empty() ? 1 : weights[i];
  }
  return kept;
}

}  // namespace

std::optional<std::vector<HeldSegments>> SegmentsByRank(const planner::GridPlan& plan,
                                                       int segments) {
  if (!plan.schedule || planner::LayoutOf(*plan.schedule, plan.stages).chunks != 1) {
    return std::nullopt;
  }
  std::vector<HeldSegments> out;
  for (const planner::RankPlacement& p : plan.ranks) {
    const std::optional<std::vector<int>> counts =
        StageCounts(planner::ReplicaPartition(plan.partition, p.replica), plan.stages, segments);
    if (!counts) return std::nullopt;
    std::vector<int> first(counts->size() + 1, 0);
    std::partial_sum(counts->begin(), counts->end(), first.begin() + 1);
    out.push_back(HeldSegments{0, first[p.stage], first[p.stage + 1]});
  }
  return out;
}

std::vector<int> BestAssignment(const std::vector<std::vector<int64_t>>& score) {
  // The Hungarian method on cost = -score. Potentials u (rows) and v (columns) keep every
  // reduced cost -score[i][j] - u[i] - v[j] >= 0, and 0 on the matched pairs; rows join one at
  // a time, each by the shortest path of reduced costs to a free column, the potentials moved
  // so that the path's pairs are tight. Indices from 1: column 0 is where a new row starts.
  const int n = static_cast<int>(score.size());
  constexpr int64_t kInfinity = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> u(n + 1, 0), v(n + 1, 0);
  std::vector<int> row_of(n + 1, 0);    // the row matched to a column; 0: free
  std::vector<int> previous(n + 1, 0);  // the column before a column on the shortest path
  for (int row = 1; row <= n; ++row) {
    row_of[0] = row;
    int column = 0;
    std::vector<int64_t> distance(n + 1, kInfinity);
    std::vector<bool> reached(n + 1, false);
    while (row_of[column] != 0) {
      reached[column] = true;
      const int i = row_of[column];
      int64_t nearest = kInfinity;
      int next = 0;
      for (int j = 1; j <= n; ++j) {
        if (reached[j]) continue;
        const int64_t reduced = -score[i - 1][j - 1] - u[i] - v[j];
        if (reduced < distance[j]) {
          distance[j] = reduced;
          previous[j] = column;
        }
        if (distance[j] < nearest) {
          nearest = distance[j];
          next = j;
        }
      }
      for (int j = 0; j <= n; ++j) {
        if (reached[j]) {
          u[row_of[j]] += nearest;
          v[j] -= nearest;
        } else {
          distance[j] -= nearest;
        }
      }
      column = next;
    }
    for (int before; column != 0; column = before) {  // every pair on the path moves one back
      before = previous[column];
      row_of[column] = row_of[before];
    }
  }
  std::vector<int> column_of(n);
  for (int j = 1; j <= n; ++j) column_of[row_of[j] - 1] = j - 1;
  return column_of;
}

void PlaceToKeepState(const std::vector<ParkedWorker>& holders, int segments,
                      const std::vector<int64_t>& segment_weights,
                      const std::vector<Machine>& machines, planner::GridPlan* plan) {
  const std::optional<std::vector<HeldSegments>> need = SegmentsByRank(*plan, segments);
  if (!need) return;
  const std::vector<int64_t> no_weights;
  const std::vector<int64_t>& weights =
      static_cast<int>(segment_weights.size()) == segments ? segment_weights : no_weights;
  for (size_t m = 0; m < machines.size(); ++m) {
    std::vector<int> ranks;  // the plan's ranks on machine m
    for (const planner::RankPlacement& p : plan->ranks) {
      if (p.machine == static_cast<int>(m)) ranks.push_back(p.rank);
    }
    const int n = static_cast<int>(ranks.size());
    std::vector<bool> slot_taken(n, false);  // the plan's local ranks here: 0 .. n - 1 each once
    bool slots_valid = true;
    for (const int r : ranks) {
      const int l = plan->ranks[r].local_rank;
      slots_valid = slots_valid && l >= 0 && l < n && !slot_taken[l];
      if (slots_valid) slot_taken[l] = true;
    }
    if (!slots_valid) continue;
    // The holder on each of the machine's slots, if any.
    std::vector<const HeldSegments*> held(n, nullptr);
    bool any = false;
    for (const ParkedWorker& w : holders) {
      if (w.machine != machines[m].Address() || w.local_rank < 0 || w.local_rank >= n ||
          w.held.end <= w.held.first) {
        continue;
      }
      held[w.local_rank] = &w.held;
      any = true;
    }
    if (!any) continue;
    // What rank i keeps on slot l, weighed, before any preference for the plan's own slot: the
    // weights times n + 1 outweigh the preferences of all n ranks together.
    std::vector<std::vector<int64_t>> score(n, std::vector<int64_t>(n, 0));
    for (int i = 0; i < n; ++i) {
      const planner::RankPlacement& p = plan->ranks[ranks[i]];
      for (int l = 0; l < n; ++l) {
        const int64_t kept = held[l] ? KeptWeight(*held[l], (*need)[p.rank], weights) : 0;
        score[i][l] = kept * (n + 1) + (p.local_rank == l ? 1 : 0);
      }
    }
    const std::vector<int> slot = BestAssignment(score);
    for (int i = 0; i < n; ++i) plan->ranks[ranks[i]].local_rank = slot[i];
  }
}

}  // namespace mitra::manager
