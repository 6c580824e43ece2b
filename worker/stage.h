// Stage: the consecutive segments one pipeline stage holds, and nothing else.
//
// Only the stage's own segments are ever constructed here (by their factories, seeded per
// segment), so its memory holds only its own parameters. Parameters are exposed in a stable
// order with qualified names "<segment>.<parameter>", identical on every replica.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cutpoint/model.h"
#include "cutpoint/partition.h"

namespace mitra::worker {

struct NamedParameter {
  std::string name;  // "<segment>.<parameter>"
  torch::Tensor tensor;
};

class Stage {
 public:
  Stage(const cutpoint::ModelSpec& spec, const cutpoint::Partition& partition, int stage,
        uint64_t seed);

  cutpoint::Activations Forward(const cutpoint::Activations& inputs);

  const std::vector<NamedParameter>& parameters() const { return parameters_; }
  // The parameter with this qualified name, or an undefined tensor if this stage lacks it.
  torch::Tensor Find(const std::string& qualified_name) const;
  int64_t ParameterCount() const;

  int index() const { return index_; }
  int first_segment() const { return first_; }
  int end_segment() const { return end_; }

 private:
  int index_, first_, end_;
  std::vector<std::shared_ptr<cutpoint::Segment>> segments_;
  std::vector<NamedParameter> parameters_;
};

}  // namespace mitra::worker
