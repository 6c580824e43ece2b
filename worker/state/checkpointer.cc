#include "worker/state/checkpointer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include "checkpoint/store.h"
#include "checkpoint/tensor_file.h"
#include "worker/comm/job_store.h"
#include "worker/comm/report.h"
#include "worker/state/staging_pool.h"
#include "worker/step/pipeline_partitions.h"

namespace mitra::worker {
// A file's tensors in the order they are written.
using TensorList = std::vector<std::pair<std::string, torch::Tensor>>;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ModelDescription DescribeModel(const cutpoint::ModelSpec& spec) {
  ModelDescription out;
  auto add = [](std::string* list, const std::string& name, const torch::Tensor& t) {
    checkpoint::TensorRecord shape{name, checkpoint::DType::kFloat32, t.sizes().vec(), 0};
    if (!list->empty()) *list += ' ';
    *list += name + shape.ShapeString();
  };
  for (int i = 0; i < spec.num_segments(); ++i) {
    const auto segment = cutpoint::BuildSegment(spec, i, 0);
    const std::string prefix = spec.segments[i].name + ".";
    for (const auto& p : segment->named_parameters()) add(&out.parameters, prefix + p.key(), p.value());
    for (const auto& b : segment->named_buffers()) {
      if (b.value().defined()) add(&out.buffers, prefix + b.key(), b.value());
    }
    if (out.independence.ok()) out.independence = cutpoint::CheckMicroBatchIndependence(spec, i, *segment);
  }
  return out;
}

struct Checkpointer::Snapshot {
  int64_t step = 0;
  double started = 0;
  double save_s = 0;  // the training thread inside Save()
  std::vector<std::pair<std::string, TensorList>> files;
  // The live tensors to copy into staging buffers, which then take their place in `files`:
  // done by the writer thread while the training thread computes the next step's forward and
  // backward.
  struct Copy {
    size_t file = 0;
    size_t index = 0;  // in the file's TensorList
    std::string key;   // of the staging buffer
    torch::Tensor source;
  };
  std::vector<Copy> copies;
};

namespace {

// The checkpointer's own connection to the rendezvous store, under the generation's prefix.
c10::intrusive_ptr<c10d::Store> ConnectStore(const Placement& p) {
  return c10::make_intrusive<c10d::PrefixStore>(
      "gen-" + std::to_string(p.generation) + "/checkpoint", JobStore::Connect(p, /*host=*/false));
}

}  // namespace

Checkpointer::Checkpointer(Runtime& runtime, const cutpoint::ModelSpec& spec,
                           CheckpointOptions options)
    : runtime_(runtime), spec_(spec), options_(std::move(options)), fs_(&machine_fs_),
      store_(ConnectStore(runtime.placement())) {}

Checkpointer::Checkpointer(Runtime& runtime, const cutpoint::ModelSpec& spec,
                           CheckpointOptions options, FileSystem& fs)
    : runtime_(runtime), spec_(spec), options_(std::move(options)), fs_(&fs),
      store_(ConnectStore(runtime.placement())) {}

void Checkpointer::PrepareStaging() {
  if (options_.dir.empty() || !options_.async || options_.every <= 0 || writer_.joinable()) return;
  std::vector<torch::Tensor> written;  // the parameters this rank writes
  for (int i : SegmentsThisRankWrites()) {
    const std::string prefix = spec_.segments[i].name + ".";
    for (const auto& p : runtime_.stage().parameters()) {
      if (p.name.rfind(prefix, 0) == 0) written.push_back(p.tensor.detach());
    }
  }
  // Each parameter and its optimizer state: that many buffers of its shape.
  const int each = 1 + runtime_.optimizer().StateTensorsPerParameter();
  preparing_ = true;
  writer_ = std::thread([written = std::move(written), each] {
    StagingPool::OfProcess().Reserve(written, each);
  });
}

Checkpointer::~Checkpointer() {
  Wait();
  // The next generation's checkpointer (this process goes on after a morph) copies into them.
  for (auto& [key, buffer] : staging_) StagingPool::OfProcess().Give(std::move(buffer));
}

std::string Checkpointer::Key(int64_t step, const std::string& what) const {
  return std::to_string(step) + "/" + what;
}

std::vector<int> Checkpointer::SegmentsThisRankWrites() const {
  std::vector<int> out;
  for (int i : runtime_.stage().segment_ids()) {
    if (runtime_.ReplicaOwning(i) == runtime_.placement().replica()) out.push_back(i);
  }
  return out;
}

torch::Tensor Checkpointer::Staging(const std::string& key, const torch::Tensor& source) {
  torch::Tensor& buffer = staging_[key];
  if (!buffer.defined() || !buffer.sizes().equals(source.sizes()) ||
      buffer.scalar_type() != source.scalar_type()) {
    StagingPool::OfProcess().Give(std::move(buffer));
    buffer = StagingPool::OfProcess().Take(source.sizes(), source.scalar_type());
  }
  return buffer;
}

std::unique_ptr<Checkpointer::Snapshot> Checkpointer::TakeSnapshot(int64_t steps_done) {
  auto snap = std::make_unique<Snapshot>();
  snap->step = steps_done;
  snap->started = Now();
  const Optimizer& optimizer = runtime_.optimizer();
  for (int i : SegmentsThisRankWrites()) {
    const std::string prefix = spec_.segments[i].name + ".";
    TensorList tensors;
    // Parameters and optimizer state change only in the next optimizer step: they are copied
    // into staging buffers while the next forward and backward run (CopyAndRelease). Buffers
    // change in the forward (running statistics): they, and scalars, are copied now.
    auto add = [&](const std::string& key, const torch::Tensor& source, bool now = false) {
      if (now || source.dim() == 0) {
        tensors.emplace_back(key, source.detach().clone());
        return;
      }
      snap->copies.push_back({snap->files.size(), tensors.size(), prefix + key, source.detach()});
      tensors.emplace_back(key, source);
    };
    for (const auto& p : runtime_.stage().parameters()) {
      if (p.name.rfind(prefix, 0) != 0) continue;
      const std::string local = p.name.substr(prefix.size());
      add("param/" + local, p.tensor);
      for (const auto& [name, t] : optimizer.State(p.tensor)) add(name + "/" + local, t);
    }
    for (const auto& b : runtime_.stage().buffers()) {
      if (b.name.rfind(prefix, 0) == 0) {
        add("buffer/" + b.name.substr(prefix.size()), b.tensor, /*now=*/true);
      }
    }
    snap->files.emplace_back(checkpoint::SegmentFileName(spec_.segments[i].name), std::move(tensors));
  }
  if (runtime_.placement().rank == 0) {
    const RuntimeOptions& o = runtime_.options();
    auto* gen = at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
    snap->files.emplace_back(
        checkpoint::kTrainerFileName,
        TensorList{{"step", torch::scalar_tensor(steps_done, torch::kInt64)},
                  {"rng_state", at::Tensor(gen->get_state())},
                  {"global_batch", torch::scalar_tensor(o.global_batch, torch::kInt64)},
                  {"chunk_size", torch::scalar_tensor(int64_t{o.chunk_size}, torch::kInt64)},
                  {"seed", torch::scalar_tensor(static_cast<int64_t>(o.seed), torch::kInt64)},
                  {"lr_base", torch::scalar_tensor(o.lr.base, torch::kFloat64)},
                  {"lr_warmup_steps", torch::scalar_tensor(o.lr.warmup_steps, torch::kInt64)},
                  {"lr_total_steps", torch::scalar_tensor(o.lr.total_steps, torch::kInt64)},
                  {"lr_min_ratio", torch::scalar_tensor(o.lr.min_ratio, torch::kFloat64)}});
    if (const LossScaler* scaler = runtime_.loss_scaler()) {
      // Equal on every rank (every rank skips the same steps), so rank 0's copy is the state.
      snap->files.back().second.emplace_back("loss_scale",
                                             torch::scalar_tensor(scaler->scale(), torch::kFloat64));
      snap->files.back().second.emplace_back(
          "loss_scale_good_steps", torch::scalar_tensor(scaler->good_steps(), torch::kInt64));
    }
  }
  return snap;
}

void Checkpointer::Save(int64_t steps_done) {
  if (options_.dir.empty()) return;
  const double entered = Now();
  const bool was_preparing = std::exchange(preparing_, false);
  if (Status s = Wait(); !s.ok()) spdlog::error("checkpoint: {}", s.message());
  // Waiting for the staging memory to be ready blocked training: it counts.
  const double prepare_wait_s = was_preparing ? Now() - entered : 0;
  std::shared_ptr<Snapshot> snap = TakeSnapshot(steps_done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    copied_ = false;
    released_ = false;
    waited_s_ = 0;
  }
  if (!options_.async) {
    CopyAndRelease(*snap);
    snap->save_s = Now() - snap->started + prepare_wait_s;
    last_status_ = Write(*snap);
    return;
  }
  snap->save_s = Now() - snap->started + prepare_wait_s;
  // The parameters and the optimizer state stay as they are until the next optimizer step:
  // the copy may run until then.
  runtime_.BeforeNextUpdate([this] { Release(); });
  writer_ = std::thread([this, snap] {
    CopyAndRelease(*snap, /*release=*/false);
    last_status_ = Write(*snap);
  });
}

void Checkpointer::CopyAndRelease(Snapshot& snap, bool release) {
  {
    torch::NoGradGuard no_grad;
    for (Snapshot::Copy& copy : snap.copies) {
      torch::Tensor staging = Staging(copy.key, copy.source);
      staging.copy_(copy.source);
      snap.files[copy.file].second[copy.index].second = staging;
      copy.source = torch::Tensor();
    }
  }
  // Every buffer this generation's saves copy into is now in staging_: the rest of the pool
  // (a standby's reserve for a whole stage, a larger share of an earlier shape) goes.
  StagingPool::OfProcess().Clear();
  std::lock_guard<std::mutex> lock(mu_);
  copied_ = true;
  if (release) released_ = true;
  cv_.notify_all();
}

void Checkpointer::Release() {
  std::unique_lock<std::mutex> lock(mu_);
  const double start = Now();
  cv_.wait(lock, [this] { return copied_; });
  waited_s_ += Now() - start;
  released_ = true;
  cv_.notify_all();
}

double Checkpointer::AwaitRelease() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return released_; });
  return waited_s_;
}

Status Checkpointer::Wait() {
  if (writer_.joinable()) {
    Release();  // no further update will come before the next save
    writer_.join();
  }
  runtime_.BeforeNextUpdate(nullptr);
  Status s = last_status_;
  last_status_ = Status::Ok();
  return s;
}

namespace {

// Writes one tensor file (fsynced) through `fs` and appends its manifest lines to `listing`.
Status WriteTensorFile(FileSystem& fs, const std::string& path, const std::string& name,
                       const TensorList& tensors, std::string* listing) {
  auto writer = checkpoint::TorchZipWriter::Create(fs, path);
  if (!writer.ok()) return writer.status();
  for (const auto& [key, tensor] : tensors) {
    if (Status s = checkpoint::AddTensor(**writer, key, tensor); !s.ok()) return s;
  }
  auto written = (*writer)->Finish();
  if (!written.ok()) return written.status();
  *listing += checkpoint::FileLines({name, written->bytes, written->crc32c, written->tensors});
  return Status::Ok();
}

}  // namespace

Status Checkpointer::Write(const Snapshot& snap) {
  const std::string partial = checkpoint::PartialDirectory(options_.dir, snap.step);
  Status status = fs_->CreateDirectories(partial);
  std::string listing;  // the manifest's lines for this rank's files
  for (const auto& [name, tensors] : snap.files) {
    if (!status.ok()) break;
    status = WriteTensorFile(*fs_, JoinPath(partial, name), name, tensors, &listing);
  }
  const int rank = runtime_.placement().rank;
  try {
    store_->set(Key(snap.step, "files/" + std::to_string(rank)),
                std::vector<uint8_t>(listing.begin(), listing.end()));
    store_->add(Key(snap.step, status.ok() ? "done" : "failed"), 1);
    if (rank == 0) {
      Status committed = CommitAsRankZero(snap.step, snap.started);
      const double total_s = Now() - snap.started;
      // Blocked: inside Save(), plus any wait of the next optimizer step for the copy.
      const double blocked_s = snap.save_s + AwaitRelease();
      if (status.ok()) status = committed;
      if (status.ok()) {
        contract::message::Checkpoint done;
        done.step = snap.step;
        done.path = checkpoint::StepDirectory(options_.dir, snap.step);
        done.blocked_s = blocked_s;
        done.total_s = total_s;
        Emit(done);
      }
    }
  } catch (const std::exception& e) {
    status = Status::Unavailable(std::string("checkpoint coordination failed: ") + e.what());
  }
  if (!status.ok()) {
    status = Status::IoError("checkpoint of step " + std::to_string(snap.step) +
                             " was not written: " + status.message() +
                             "; earlier checkpoints are intact");
    // Tell the manager now: training goes on, unprotected since the last checkpoint.
    Emit(contract::message::CheckpointFailed{snap.step, status.message()});
  }
  return status;
}

Status Checkpointer::CommitAsRankZero(int64_t step, double started) {
  const Placement& p = runtime_.placement();
  const int world = p.world_size();
  // Writing may take long for a large model; the wait is bounded all the same.
  const double deadline = started + std::max(600.0, 20 * p.timeout_s);
  int64_t done = 0, failed = 0;
  while (true) {
    if (abandoned_) return Status::Aborted("a peer failed while the checkpoint was written");
    // Looked at before the first sleep: rank 0's own report is in, and often everyone's.
    done = store_->add(Key(step, "done"), 0);
    failed = store_->add(Key(step, "failed"), 0);
    if (done + failed >= world) break;
    if (Now() > deadline) {
      return Status::Timeout(std::to_string(world - done - failed) +
                             " ranks did not report their checkpoint files in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (failed > 0) {
    return Status::IoError(std::to_string(failed) + " of " + std::to_string(world) +
                           " ranks could not write their files (see their logs)");
  }
  checkpoint::Manifest m;
  const RuntimeOptions& o = runtime_.options();
  m.step = step;
  m.stages = p.num_stages();
  m.replicas = p.num_replicas();
  m.partition = runtime_.pipelines().ToString();
  m.schedule = planner::ScheduleName(o.schedule);
  m.global_batch = o.global_batch;
  m.seed = o.seed;
  m.chunk_size = o.chunk_size;
  m.micro_batch_independent = spec_.micro_batch_independent;
  m.optimizer = runtime_.optimizer().Name();
  m.module_keys = spec_.state_dict_keys == cutpoint::ModelSpec::StateDictKeys::kModule;
  for (const auto& s : spec_.segments) m.segments.push_back(s.name);
  for (int r = 0; r < world; ++r) {
    const std::vector<uint8_t> raw = store_->get(Key(step, "files/" + std::to_string(r)));
    std::istringstream lines(std::string(raw.begin(), raw.end()));
    for (std::string line; std::getline(lines, line);) {
      if (Status s = checkpoint::ParseFileLine(line, &m.files); !s.ok()) {
        return Status::Internal("rank " + std::to_string(r) + " reported " + s.message());
      }
    }
  }
  if (Status s = checkpoint::Commit(*fs_, options_.dir, m); !s.ok()) return s;
  return checkpoint::Prune(*fs_, options_.dir, options_.keep);
}

namespace {

Status AnotherModel(const std::string& path, const std::string& file, const std::string& why) {
  return Status::InvalidArgument(path + "/" + file + ": " + why +
                                 ": the checkpoint was written by another model; use another "
                                 "--checkpoint-dir");
}

}  // namespace

bool Checkpointer::Complete(int64_t step) {
  return checkpoint::VerifyFiles(*fs_, checkpoint::StepDirectory(options_.dir, step), {""}).ok();
}

Status Checkpointer::Restore(int64_t step) {
  return RestoreSegments(step, runtime_.stage().segment_ids(), /*trainer_state=*/true);
}

Status Checkpointer::RestoreSegments(int64_t step, const std::vector<int>& segments,
                                     bool trainer_state) {
  const std::string path = checkpoint::StepDirectory(options_.dir, step);
  // The manifest only: each file is checked as it is read.
  auto manifest = checkpoint::VerifyFiles(*fs_, path, {""});
  if (!manifest.ok()) return manifest.status();
  std::vector<std::string> names;
  for (const auto& s : spec_.segments) names.push_back(s.name);
  if (manifest->segments != names) {
    return Status::InvalidArgument("checkpoint " + path + " was written by another model (its "
                                   "segments differ from this program's): use another "
                                   "--checkpoint-dir");
  }
  // Checkpoints from before the optimizer was recorded were all written with AdamW.
  const std::string written_by = manifest->optimizer.empty() ? "adamw" : manifest->optimizer;
  const bool same_optimizer = written_by == runtime_.optimizer().Name();
  if (!same_optimizer && runtime_.placement().rank == 0) {
    Warn("resuming from " + path + ", written with the " + written_by + " optimizer, with " +
         runtime_.optimizer().Name() + ": the optimizer's state starts afresh");
  }
  for (const int i : segments) {
    const std::string file = checkpoint::SegmentFileName(spec_.segments[i].name);
    const checkpoint::FileEntry* entry = manifest->FindFile(file);
    if (entry == nullptr) {
      return Status::IoError(path + "/" + checkpoint::kManifestName + " does not list " + file +
                             " (the checkpoint is incomplete)");
    }
    const bool optimizer_state = same_optimizer && runtime_.KeepsOptimizerStateOf(i);
    if (Status s = RestoreSegment(path, *entry, i, optimizer_state); !s.ok()) return s;
  }
  return trainer_state ? RestoreTrainerState(path, *manifest) : Status::Ok();
}

// Each file is read once, every tensor straight into the memory it is restored to, the file's
// checksum checked over all its bytes as they are read. Names and shapes are checked against
// the model from the manifest first, so nothing is read for another model.
Status ReadSegmentFile(const std::string& dir, const checkpoint::FileEntry& entry,
                       const std::map<std::string, torch::Tensor>& live, OptimizerStates* state) {
  const std::string& file = entry.name;
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> into;  // tensor name -> where it is read to
  for (const auto& [name, tensor] : live) {
    const checkpoint::TensorRecord* t = entry.FindTensor(name);
    if (!t || t->shape != tensor.sizes().vec() ||
        checkpoint::ToScalarType(t->dtype) != tensor.scalar_type()) {
      const std::string what = name.rfind("param/", 0) == 0 ? "parameter" : "buffer";
      return AnotherModel(dir, file, what + " '" + name.substr(name.find('/') + 1) + "' is " +
                                         (t ? "of another shape or type (" + t->ShapeString() + ")"
                                            : std::string("missing")));
    }
    // Read in place; a non-contiguous tensor (never, for nn modules) or one in a GPU's memory
    // via a copy in host memory.
    into[name] = tensor.is_contiguous() && tensor.is_cpu() ? tensor : checkpoint::EmptyFor(*t);
  }
  // The rest is optimizer state, "<state>/<parameter>", of parameters of this segment.
  for (const checkpoint::TensorRecord& t : entry.tensors) {
    if (live.count(t.name)) continue;
    const size_t slash = t.name.find('/');
    const std::string kind = t.name.substr(0, slash == std::string::npos ? 0 : slash);
    const std::string local = slash == std::string::npos ? "" : t.name.substr(slash + 1);
    if (kind.empty() || kind == "param" || kind == "buffer" || !live.count("param/" + local)) {
      return AnotherModel(dir, file, "it holds '" + t.name + "', which this model does not have");
    }
    if (state == nullptr) continue;
    into[t.name] = checkpoint::EmptyFor(t);
    (*state)[local][kind] = into[t.name];
  }
  Status read = checkpoint::ReadTensorFile(
      (std::filesystem::path(dir) / file).string(), entry.bytes, entry.crc32c, entry.tensors,
      [&](const checkpoint::TensorRecord& t) -> void* {
        auto it = into.find(t.name);
        return it == into.end() ? nullptr : it->second.data_ptr();
      });
  if (!read.ok()) return read;
  for (const auto& [name, tensor] : live) {
    if (!into.at(name).is_same(tensor)) tensor.copy_(into.at(name));
  }
  return Status::Ok();
}

std::map<std::string, torch::Tensor> SegmentTensors(const Stage& stage, const std::string& segment) {
  const std::string prefix = segment + ".";
  std::map<std::string, torch::Tensor> live;
  for (const auto& p : stage.parameters()) {
    if (p.name.rfind(prefix, 0) == 0) live["param/" + p.name.substr(prefix.size())] = p.tensor;
  }
  for (const auto& b : stage.buffers()) {
    if (b.name.rfind(prefix, 0) == 0) live["buffer/" + b.name.substr(prefix.size())] = b.tensor;
  }
  return live;
}

Status Checkpointer::RestoreSegment(const std::string& path, const checkpoint::FileEntry& entry,
                                    int segment, bool with_optimizer_state) {
  const auto live = SegmentTensors(runtime_.stage(), spec_.segments[segment].name);
  OptimizerStates state;
  Status read = ReadSegmentFile(path, entry, live, with_optimizer_state ? &state : nullptr);
  if (!read.ok()) return read;
  for (const auto& [local, tensors] : state) {
    const torch::Tensor& param = live.at("param/" + local);
    if (Status s = runtime_.optimizer().SetState(param, OnDeviceOf(param, tensors)); !s.ok()) {
      return AnotherModel(path, entry.name, "parameter '" + local + "': " + s.message());
    }
  }
  return Status::Ok();
}

Status Checkpointer::RestoreTrainerState(const std::string& path,
                                         const checkpoint::Manifest& manifest) {
  const checkpoint::FileEntry* trainer = manifest.FindFile(checkpoint::kTrainerFileName);
  if (trainer == nullptr) {
    return Status::IoError(path + "/" + checkpoint::kManifestName + " does not list " +
                           checkpoint::kTrainerFileName + " (the checkpoint is incomplete)");
  }
  const checkpoint::TensorRecord* rng = trainer->FindTensor("rng_state");
  if (!rng || rng->dtype != checkpoint::DType::kUInt8) {
    return Status::IoError(path + "/" + checkpoint::kTrainerFileName +
                           " holds no rng_state (the checkpoint is damaged)");
  }
  torch::Tensor rng_state = checkpoint::EmptyFor(*rng);
  std::map<std::string, torch::Tensor> settings;  // the training settings it was written with
  for (const checkpoint::TensorRecord& t : trainer->tensors) {
    if (t.name != "rng_state") settings[t.name] = checkpoint::EmptyFor(t);
  }
  Status read = checkpoint::ReadTensorFile(
      (std::filesystem::path(path) / checkpoint::kTrainerFileName).string(), trainer->bytes,
      trainer->crc32c, trainer->tensors, [&](const checkpoint::TensorRecord& t) -> void* {
        if (t.name == "rng_state") return rng_state.data_ptr();
        auto it = settings.find(t.name);
        return it == settings.end() ? nullptr : it->second.data_ptr();
      });
  if (!read.ok()) return read;
  auto* gen = at::check_generator<at::CPUGeneratorImpl>(at::detail::getDefaultCPUGenerator());
  gen->set_state(*rng_state.unsafeGetTensorImpl());
  // A checkpoint written without loss scaling (fp32, bf16) leaves the scale at its start.
  if (LossScaler* scaler = runtime_.loss_scaler(); scaler && settings.count("loss_scale")) {
    scaler->Restore(settings["loss_scale"].item<double>(),
                    settings.count("loss_scale_good_steps")
                        ? settings["loss_scale_good_steps"].item<int64_t>()
                        : 0);
  }
  if (runtime_.placement().rank == 0) WarnAboutChangedSettings(path, settings);
  return Status::Ok();
}

void Checkpointer::WarnAboutChangedSettings(
    const std::string& path, const std::map<std::string, torch::Tensor>& written) const {
  // Changing these on resume is allowed (a new learning-rate schedule, say), but it is never
  // silent: the job no longer equals the one that was checkpointed.
  const RuntimeOptions& o = runtime_.options();
  std::vector<std::pair<std::string, double>> now = {
      {"seed", static_cast<double>(o.seed)},
      {"global_batch", static_cast<double>(o.global_batch)},
      {"lr_base", o.lr.base},
      {"lr_warmup_steps", static_cast<double>(o.lr.warmup_steps)},
      {"lr_total_steps", static_cast<double>(o.lr.total_steps)},
      {"lr_min_ratio", o.lr.min_ratio}};
  // The micro-batch is part of the math only for a model that depends on it.
  if (!spec_.micro_batch_independent) now.emplace_back("chunk_size", o.chunk_size);
  std::vector<std::string> changed;
  for (const auto& [name, value] : now) {
    auto it = written.find(name);
    if (it == written.end()) continue;
    const double then = it->second.item<double>();
    if (then != value) {
      std::ostringstream text;  // shortest form: 0.001, 16
      text << name << " " << then << " -> " << value;
      changed.push_back(text.str());
    }
  }
  if (changed.empty()) return;
  std::string text;
  for (const std::string& c : changed) text += (text.empty() ? "" : ", ") + c;
  Warn("resuming from " + path + " with other training settings than it was written with (" +
       text + "): the job continues, but not as the checkpointed one would have");
}

void Checkpointer::Warn(const std::string& message) const {
  spdlog::warn("{}", message);
  Emit(contract::message::Warning{message});
}

}  // namespace mitra::worker
