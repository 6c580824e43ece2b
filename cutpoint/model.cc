#include "mitra/cutpoint/model.h"

#include <set>

#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "common/strings.h"

namespace mitra::cutpoint {

void ModelSpec::AddSegment(std::string name, SegmentFactory factory) {
  segments.push_back({std::move(name), std::move(factory)});
}

void ModelSpec::TieWeights(std::string name, std::vector<std::string> members) {
  tied_weights.push_back({std::move(name), std::move(members)});
}

std::pair<std::string, std::string> SplitQualifiedName(const std::string& qualified) {
  auto dot = qualified.find('.');
  if (dot == std::string::npos) return {qualified, ""};
  return {qualified.substr(0, dot), qualified.substr(dot + 1)};
}

Status ModelSpec::Validate() const {
  if (segments.empty()) return Status::InvalidArgument("the model has no segments: add at least one");
  if (!loss) return Status::InvalidArgument("the model has no loss function: set ModelSpec::loss");
  std::set<std::string> names;
  for (const auto& s : segments) {
    if (!IsPlainName(s.name)) {
      return Status::InvalidArgument("segment name '" + s.name +
                                     "' must be non-empty and contain no '.', '/' or whitespace "
                                     "(it names the segment's checkpoint file)");
    }
    if (!names.insert(s.name).second) {
      return Status::InvalidArgument("segment name '" + s.name + "' is used twice");
    }
    if (!s.factory) return Status::InvalidArgument("segment '" + s.name + "' has no factory");
  }
  std::set<std::string> tied;
  for (const auto& t : tied_weights) {
    if (t.members.size() < 2) {
      return Status::InvalidArgument("tied weight '" + t.name + "' needs at least two members");
    }
    for (const auto& m : t.members) {
      if (!names.count(SplitQualifiedName(m).first)) {
        return Status::InvalidArgument("tied weight '" + t.name + "': '" + m +
                                       "' does not start with a segment name");
      }
      if (!tied.insert(m).second) {
        return Status::InvalidArgument("parameter '" + m + "' is tied twice");
      }
    }
  }
  return Status::Ok();
}

std::shared_ptr<Segment> BuildSegment(const ModelSpec& spec, int index, uint64_t seed) {
  // A fixed mix of (seed, index): neighbouring seeds must not share segment streams.
  torch::manual_seed(seed * 1000003ULL + static_cast<uint64_t>(index) * 7919ULL + 17ULL);
  auto segment = spec.segments.at(index).factory();
  TORCH_CHECK(segment, "the factory of segment '", spec.segments[index].name,
              "' returned no segment");
  return segment;
}

std::vector<std::string> MicroBatchDependentModules(const Segment& segment) {
  std::vector<std::string> found;
  for (const auto& item : segment.named_modules("", /*include_self=*/true)) {
    const torch::nn::Module& m = *item.value();
    std::string kind;
    if (dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m)) {
      kind = "BatchNorm1d";
    } else if (dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m)) {
      kind = "BatchNorm2d";
    } else if (dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m)) {
      kind = "BatchNorm3d";
    } else if (auto* stats = dynamic_cast<const RunningStatistics*>(&m)) {
      kind = stats->kind();
    } else {
      for (const auto& buffer : m.named_buffers(/*recurse=*/false)) {
        if (buffer.key() == "running_mean" || buffer.key() == "num_batches_tracked") {
          kind = "keeps running statistics";
          break;
        }
      }
    }
    if (!kind.empty()) found.push_back((item.key().empty() ? m.name() : item.key()) + " (" + kind + ")");
  }
  return found;
}

Status CheckMicroBatchIndependence(const ModelSpec& spec, int index, const Segment& segment) {
  if (!spec.micro_batch_independent) return Status::Ok();
  const std::vector<std::string> found = MicroBatchDependentModules(segment);
  if (found.empty()) return Status::Ok();
  return Status::InvalidArgument(
      "the model declares micro_batch_independent, but segment '" + spec.segments[index].name +
      "' holds " + found.front() + ", whose result depends on the other samples of its "
      "micro-batch: remove the declaration (the micro-batch size is then fixed for the job)");
}

std::vector<int64_t> CountSegmentParameters(const ModelSpec& spec) {
  std::vector<int64_t> counts;
  for (int i = 0; i < spec.num_segments(); ++i) {
    int64_t n = 0;
    for (const auto& p : BuildSegment(spec, i, 0)->parameters()) n += p.numel();
    counts.push_back(n);
  }
  return counts;
}

Result<Partition> PartitionModel(const ModelSpec& spec, const PartitionMethod& method,
                                 int num_stages) {
  const bool by_params = method.kind == PartitionMethod::Kind::kParams;
  return MakePartition(method, spec.num_segments(), num_stages,
                       by_params ? CountSegmentParameters(spec) : std::vector<int64_t>{});
}

}  // namespace mitra::cutpoint
