// ControllerTest: the controller driven by hand, with no processes, no clock and no sleeps;
// the helpers feed a generation's ranks through start, ready, steps, stops and exits.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "manager/controller.h"
#include "tests/manager/machine_lists.h"

namespace mitra::manager {

class ControllerTest : public ::testing::Test {
 protected:
  ControllerOptions Options() {
    ControllerOptions o;
    o.stages = 2;
    o.segments = 4;
    o.global_batch = 16;
    o.max_steps = 100;
    return o;
  }

  void Make(ControllerOptions options) { controller_ = std::make_unique<Controller>(options); }

  std::vector<ControllerAction> Feed(const ControllerInput& input) {
    last_ = controller_->Handle(input, now_);
    return last_;
  }
  void Advance(double seconds) {
    now_ += seconds;
    Feed(TimerInput{});
  }
  // Time passes while every rank of the current generation sends a heartbeat each second.
  void AdvanceAlive(double seconds) {
    for (int i = 0; i < static_cast<int>(seconds) - 1; ++i) {
      now_ += 1;
      for (int r = 0; r < controller_->plan().world_size(); ++r) {
        Feed(RankReport{controller_->generation(), r, RankReport::Kind::kHeartbeat, 0});
      }
    }
    Advance(seconds - std::max(0, static_cast<int>(seconds) - 1));
  }

  template <class T>
  std::vector<T> All() const {
    std::vector<T> out;
    for (const ControllerAction& a : last_) {
      if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
    }
    return out;
  }
  std::vector<int> SignalsOf(int signal_number) const {
    std::vector<int> ranks;
    for (const SignalAction& s : All<SignalAction>()) {
      if (s.signal_number == signal_number) ranks.push_back(s.rank);
    }
    return ranks;
  }
  bool Recorded(const std::string& event) const {
    for (const RecordAction& r : All<RecordAction>()) {
      if (r.event == event) return true;
    }
    return false;
  }
  const LaunchAction& OnlyLaunch() const {
    static LaunchAction none;
    const auto launches = All<LaunchAction>();
    EXPECT_EQ(launches.size(), 1u);
    if (launches.empty()) return none;
    launched_ = launches[0];
    return launched_;
  }

  // Starts every rank of the current generation, makes them ready, heartbeat and train a step.
  void RunGeneration(int64_t step) {
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    for (int r = 0; r < world; ++r) Feed(RankStarted{g, r, 100 + r});
    for (int r = 0; r < world; ++r) {
      Feed(RankReport{g, r, RankReport::Kind::kReady, 0});
      Feed(RankReport{g, r, RankReport::Kind::kHeartbeat, 0});
    }
    Feed(RankReport{g, 0, RankReport::Kind::kStep, step});
  }
  // Every rank of the current generation reports `stopped` at `step` and exits 0.
  void StopAll(int64_t step) {
    const int64_t g = controller_->generation();
    const int world = controller_->plan().world_size();
    for (int r = 0; r < world; ++r) Feed(RankReport{g, r, RankReport::Kind::kStopped, step});
    for (int r = 0; r < world; ++r) Feed(RankExited{g, r, launcher::ExitStatus{0, 0}});
  }
  // Every running rank except `except` exits with SIGKILL.
  void KillAllBut(int except) {
    const int64_t g = controller_->generation();
    for (int r = 0; r < controller_->plan().world_size(); ++r) {
      if (r != except) Feed(RankExited{g, r, launcher::ExitStatus{0, SIGKILL}});
    }
  }
  static std::vector<std::string> Addresses(const LaunchAction& launch) {
    std::vector<std::string> out;
    for (const RankPlacement& p : launch.plan.ranks) {
      out.push_back(launch.machines[p.machine].Address());
    }
    return out;
  }

  std::unique_ptr<Controller> controller_ = std::make_unique<Controller>(Options());
  double now_ = 1000;
  std::vector<ControllerAction> last_;
  mutable LaunchAction launched_;
};

}  // namespace mitra::manager
