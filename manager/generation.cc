#include "manager/generation.h"

#include <algorithm>

namespace mitra::manager {

double Deadlines::Earliest() const {
  double next = std::numeric_limits<double>::infinity();
  for (const auto& d : {stop, finish, kill, abandon, health, warm_up, starting_note}) {
    if (d) next = std::min(next, *d);
  }
  return next;
}

Generation Generation::Launched(int64_t number, planner::GridPlan plan,
                                std::vector<Machine> machines, double now) {
  Generation g;
  g.number = number;
  g.live = true;
  g.launched_at = now;
  g.stop_signalled = now;  // until a stop is asked for, `stopped` comes at the end of training
  g.ranks.assign(plan.world_size(), RankState{});
  for (size_t r = 0; r < g.ranks.size(); ++r) {
    g.ranks[r].machine = plan.ranks[r].machine;
    g.ranks[r].running = true;
    g.ranks[r].last_heard = now;
  }
  g.profile_check = ProfileCheck(plan.predicted_step_s);
  g.plan = std::move(plan);
  g.machines = std::move(machines);
  return g;
}

int Generation::Running() const {
  return static_cast<int>(
      std::count_if(ranks.begin(), ranks.end(), [](const RankState& r) { return r.running; }));
}

bool Generation::MarkReady(int rank) {
  if (ranks[rank].ready) return false;
  ranks[rank].ready = true;
  ++ready;
  return true;
}

bool Generation::AllFinished() const {
  return std::all_of(ranks.begin(), ranks.end(), [](const RankState& r) { return r.finished; });
}

std::vector<int64_t> Generation::RunningPids() const {
  std::vector<int64_t> pids;
  for (const RankState& r : ranks) {
    if (r.running) pids.push_back(r.pid);
  }
  return pids;
}

std::string Generation::Where(int rank) const {
  std::string text = "rank " + std::to_string(rank);
  if (machines.size() > 1 || !MachineOf(rank).IsLocal()) text += " on " + MachineOf(rank).Address();
  return text + " (pid " + std::to_string(ranks[rank].pid) + ")";
}

std::string Generation::ShapeText() const {
  return std::to_string(plan.stages) + " x " + std::to_string(plan.replicas);
}

}  // namespace mitra::manager
