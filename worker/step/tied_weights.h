// TiedWeights: keeps the copies of a tied weight (ModelSpec::TieWeights) identical.
//
// Within one pipeline (replica), the stages holding members of a tie exchange values over the
// global group: at start the first member's value is copied to every other member; after each
// backward (and after the data-parallel reduction) every holder sums the members' gradients in
// the same fixed order, so all copies receive bitwise-identical gradients and stay equal.
#pragma once

#include <string>
#include <vector>

#include "mitra/cutpoint/model.h"
#include "mitra/cutpoint/partition.h"
#include "mitra/worker/placement.h"
#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"

namespace mitra::worker {

class TiedWeights {
 public:
  // Fails (InvalidArgument) when a member names no parameter of its segment. `partition` cuts
  // the model into `layout`'s virtual stages; a tie's holders are their pipeline positions.
  static Result<TiedWeights> Create(const cutpoint::ModelSpec& spec,
                                    const cutpoint::Partition& partition,
                                    const planner::ChunkLayout& layout,
                                    const Placement& placement, const Stage& stage);

  void SyncInitialValues(Comm& comm);
  void SumGradients(Comm& comm);

  // True for a member other than the first: counted once in the global gradient norm.
  bool IsSecondaryCopy(const std::string& qualified_name) const;

 private:
  struct Group {
    std::vector<int> stages;                  // holder stages, ascending, without repeats
    int source_stage = 0;                     // holds the first member
    std::vector<torch::Tensor> local;         // this stage's members, in member order
    bool local_has_first = false;
  };
  std::vector<int> PeerRanks(const Group& g) const;

  int stage_ = 0;
  const Placement* placement_ = nullptr;
  std::vector<Group> groups_;
  std::vector<std::string> secondary_;
};

}  // namespace mitra::worker
