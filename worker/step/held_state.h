// HeldState: what a worker keeps in memory of the stage it trained when it parks, so that the
// next generation starts from it instead of from storage (docs/manager.md, "State from peers").
//
// It holds the stage's segments themselves (their modules: parameters and buffers, no copy),
// the optimizer's state of each of their parameters, and the job-wide trainer state (the loss
// scale, the default generator), all as they were after `step` completed steps. The next
// Runtime adopts the segments it owns again (Runtime::Create), and serves the others to the
// ranks that need them (worker/state/state_exchange.h). Moving it is cheap; copying is not allowed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "mitra/cutpoint/model.h"

namespace mitra::worker {

// The job-wide part of the state: the same on every rank.
struct TrainerState {
  double loss_scale = 0;       // 0: no loss scaling
  int64_t loss_scale_good_steps = 0;
  torch::Tensor rng_state;     // the default CPU generator's state (uint8)
};

struct HeldState {
  int64_t step = -1;  // completed steps the state is of; -1: holds nothing
  int first_segment = 0, end_segment = 0;
  // Segment first_segment + i, with its parameters and buffers as they were after `step`.
  std::vector<std::shared_ptr<cutpoint::Segment>> segments;
  // The optimizer that updated them (Optimizer::Name()) and its state, by qualified parameter
  // name ("<segment>.<name>") and state name; a parameter never updated has none.
  std::string optimizer;
  std::map<std::string, std::map<std::string, torch::Tensor>> optimizer_state;
  TrainerState trainer;

  // Segments a standby worker built ahead of its placement, for the stage it was meant for, as
  // cutpoint::BuildSegment(spec, i, built_seed) builds them: no step's state. A stage takes one
  // instead of building it (the same object, the same values) and gets its state from peers or
  // the checkpoint as for any segment it builds.
  std::map<int, std::shared_ptr<cutpoint::Segment>> built;
  uint64_t built_seed = 0;

  HeldState() = default;
  HeldState(HeldState&&) = default;
  HeldState& operator=(HeldState&&) = default;
  HeldState(const HeldState&) = delete;
  HeldState& operator=(const HeldState&) = delete;

  bool empty() const { return step < 0 || segments.empty(); }
  // Whether every segment of [first_segment, end_segment) is there (none taken, none lost with
  // a runtime that failed before its state was whole).
  bool Whole() const;
  // Whether segment `segment` is held as it was after `at_step` steps.
  bool Holds(int segment, int64_t at_step) const {
    return !empty() && step == at_step && segment >= first_segment && segment < end_segment &&
           segments[segment - first_segment] != nullptr;
  }
  // Takes segment `segment` out (null when it is not held at `at_step`).
  std::shared_ptr<cutpoint::Segment> Take(int segment, int64_t at_step);
  // Takes built segment `segment` out (null when none was built, or with another seed).
  std::shared_ptr<cutpoint::Segment> TakeBuilt(int segment, uint64_t seed);
  // The bytes of the parameters, buffers and optimizer state held.
  int64_t Bytes() const;
};

}  // namespace mitra::worker
