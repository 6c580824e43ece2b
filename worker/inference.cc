#include "mitra/worker/inference.h"

#include <filesystem>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "checkpoint/store.h"
#include "common/file_system.h"
#include "worker/state/checkpointer.h"

namespace mitra::worker {
namespace fs = std::filesystem;

Result<std::unique_ptr<InferenceModel>> InferenceModel::Load(const cutpoint::ModelSpec& spec,
                                                             const std::string& path) {
  if (Status s = spec.Validate(); !s.ok()) return s;
  auto whole = cutpoint::MakePartition(cutpoint::PartitionMethod{}, spec.num_segments(), 1);
  if (!whole.ok()) return whole.status();
  std::unique_ptr<InferenceModel> model(
      new InferenceModel(spec, std::make_unique<Stage>(spec, *whole, 0, /*seed=*/0)));
  model->stage_->SetTraining(false);
  std::error_code ec;
  Status loaded;
  if (fs::is_regular_file(path, ec)) {
    loaded = model->LoadExport(path);
  } else if (fs::exists(fs::path(path) / checkpoint::kManifestName, ec)) {
    loaded = model->LoadCheckpoint(path);
  } else if (fs::is_directory(path, ec)) {
    std::vector<std::string> skipped;
    auto found = checkpoint::FindNewestValid(path, &skipped);
    if (!found.ok()) {
      return Status::NotFound(path + " holds no valid checkpoint" +
                              (skipped.empty() ? "" : " (" + skipped.front() + ")"));
    }
    loaded = model->LoadCheckpoint(found->path);
  } else {
    return Status::NotFound(path + " does not exist: give a checkpoint directory or a file "
                                   "written by `mitra checkpoint export`");
  }
  if (!loaded.ok()) return loaded;
  return model;
}

Status InferenceModel::LoadCheckpoint(const std::string& dir) {
  auto manifest = checkpoint::VerifyFiles(dir, {""});  // the manifest; files as they are read
  if (!manifest.ok()) return manifest.status();
  std::vector<std::string> names;
  for (const auto& s : spec_.segments) names.push_back(s.name);
  if (manifest->segments != names) {
    return Status::InvalidArgument("checkpoint " + dir + " was written by another model (its "
                                   "segments differ from this program's)");
  }
  for (const std::string& segment : names) {
    const checkpoint::FileEntry* entry = manifest->FindFile(checkpoint::SegmentFileName(segment));
    if (entry == nullptr) {
      return Status::IoError(dir + "/" + checkpoint::kManifestName + " does not list the file of "
                             "segment '" + segment + "' (the checkpoint is incomplete)");
    }
    Status s = ReadSegmentFile(dir, *entry, SegmentTensors(*stage_, segment), nullptr);
    if (!s.ok()) return s;
  }
  step_ = manifest->step;
  return Status::Ok();
}

Status InferenceModel::LoadExport(const std::string& file) {
  PosixFileSystem disk;
  Result<std::string> text = disk.ReadFile(file);  // a regular file: a FIFO is not waited on
  if (!text.ok()) return text.status();
  const std::vector<char> bytes(text->begin(), text->end());
  c10::IValue root;
  try {
    // LibTorch's unpickler builds tensors, lists and dicts and calls no Python: a file that
    // carries code (a __reduce__ naming os.system) is refused here, its code never run.
    root = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(file + " is not a file written by `mitra checkpoint export` "
                                   "(torch.load format): " + e.what());
  }
  auto not_export = [&](const std::string& why) {
    return Status::InvalidArgument(file + " " + why + ": it was not written by `mitra checkpoint "
                                   "export`");
  };
  if (!root.isGenericDict()) return not_export("holds no dict");
  const c10::Dict<c10::IValue, c10::IValue> dict = root.toGenericDict();
  if (!dict.contains("model") || !dict.at("model").isGenericDict()) {
    return not_export("holds no 'model' dict");
  }
  const c10::Dict<c10::IValue, c10::IValue> model = dict.at("model").toGenericDict();
  auto tensor_of = [&](const std::string& name) -> torch::Tensor {
    if (!model.contains(name) || !model.at(name).isTensor()) return {};
    return model.at(name).toTensor();
  };
  torch::NoGradGuard no_grad;
  size_t used = 0;
  for (const auto* list : {&stage_->parameters(), &stage_->buffers()}) {
    for (const NamedTensor& t : *list) {
      const torch::Tensor value = tensor_of(t.name);
      if (!value.defined() || !value.sizes().equals(t.tensor.sizes())) {
        return Status::InvalidArgument(
            file + ": '" + t.name + "' is " + (value.defined() ? "of another shape" : "missing") +
            ": the file was exported from another model");
      }
      t.tensor.copy_(value);
      ++used;
    }
  }
  if (used != model.size()) {
    return Status::InvalidArgument(file + " holds tensors this model does not have: it was "
                                   "exported from another model");
  }
  if (dict.contains("trainer") && dict.at("trainer").isGenericDict()) {
    const auto trainer = dict.at("trainer").toGenericDict();
    if (trainer.contains("step") && trainer.at("step").isTensor()) {
      step_ = trainer.at("step").toTensor().item<int64_t>();
    }
  }
  return Status::Ok();
}

cutpoint::Activations InferenceModel::Forward(const cutpoint::Activations& batch) {
  torch::NoGradGuard no_grad;
  return stage_->Forward(batch, {ForwardKey::kEvalStep, 0});
}

EvalResult InferenceModel::Evaluate(const Dataset& dataset,
                                    const std::vector<std::pair<std::string, MetricFn>>& metrics,
                                    int64_t max_samples, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  int64_t n = dataset.Size();
  if (max_samples > 0) n = std::min(n, max_samples);
  std::vector<double> sums(metrics.size() + 1, 0.0);
  for (int64_t begin = 0; begin < n; begin += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = begin; i < std::min(n, begin + batch_size); ++i) indices.push_back(i);
    const cutpoint::Activations batch = Collate(dataset, indices);
    const cutpoint::Activations out = Forward(batch);
    sums[0] += spec_.loss(out, batch).item<double>();
    for (size_t m = 0; m < metrics.size(); ++m) {
      sums[m + 1] += metrics[m].second(out, batch).to(torch::kFloat64).sum().item<double>();
    }
  }
  EvalResult result;
  result.samples = n;
  const double per = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  result.loss = sums[0] * per;
  for (size_t m = 0; m < metrics.size(); ++m) {
    result.metrics.emplace_back(metrics[m].first, sums[m + 1] * per);
  }
  return result;
}

}  // namespace mitra::worker
