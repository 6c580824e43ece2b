#include "mitra/worker/trainer.h"

#include <unistd.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "checkpoint/store.h"
#include "checkpoint/tensor_file.h"
#include "checkpoint/torch_zip.h"
#include "common/strings.h"
#include "mitra/contract/placement.h"
#include "mitra/worker/stage.h"
#include "worker/comm/comm.h"
#include "worker/comm/report.h"
#include "worker/heap.h"
#include "worker/heartbeat.h"
#include "worker/parking.h"
#include "worker/profiler.h"
#include "worker/state/checkpointer.h"
#include "worker/state/staging_pool.h"
#include "worker/state/state_exchange.h"
#include "worker/step/held_state.h"
#include "worker/step/pipeline_partitions.h"

namespace mitra::worker {
namespace {

// Set by the stop signals: kExitAfterStop (SIGUSR1, SIGINT), kParkAfterStop (SIGUSR2, a
// morph: checkpoint, then park when the placement allows it, else exit), kHoldAfterStop
// (SIGURG, a morph whose next generation takes the state from memory: park holding it, with no
// checkpoint; contract/park.h) and kAbandonStep (SIGALRM, a peer failed: give up the step in
// flight now and park with the steps completed, instead of at the next message to that peer).
constexpr int kExitAfterStop = 1;
constexpr int kParkAfterStop = 2;
constexpr int kHoldAfterStop = 4;
constexpr int kAbandonStep = 8;
volatile std::sig_atomic_t g_stop_requested = 0;

// How long a parked worker waits for its next placement. The manager hands it one, or lets it
// go, as soon as the generation it stopped in has ended; the end of its input (the manager
// gone) ends the wait at once.
constexpr double kParkTimeoutS = 300;

extern "C" void OnStopSignal(int signal_number) {
  const int kind = signal_number == SIGUSR2   ? kParkAfterStop
                   : signal_number == SIGURG  ? kHoldAfterStop
                   : signal_number == SIGALRM ? kAbandonStep
                                              : kExitAfterStop;
  g_stop_requested = g_stop_requested | kind;
}

StopWish CurrentStopWish() {
  if (g_stop_requested == 0) return StopWish::kNone;
  if (g_stop_requested & kAbandonStep) return StopWish::kAbandon;
  return g_stop_requested == kHoldAfterStop ? StopWish::kHold : StopWish::kStop;
}

// How long a rank that stopped on its peers' wish waits for its own stop signal.
constexpr auto kLateSignalWait = std::chrono::seconds(1);

// The manager signals every rank, but the ranks' wishes are combined at a step's all-reduce: a
// rank may stop on its peers' wish before its own signal has arrived (over SSH it took a few
// hundred milliseconds). Whether to park or to exit is in that signal, so it waits for it, a
// little: a signal that has not come by then (once in about six SSH shrinks here, for reasons
// not found) costs kLateSignalWait, then the rank exits and is started again.
// (Combining the kind of stop in the all-reduce instead would not do: the late signal would
// then reach the parked worker, and stop its next generation after one step.)
void AwaitOwnStopSignal() {
  const auto deadline = std::chrono::steady_clock::now() + kLateSignalWait;
  while (g_stop_requested == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  sigaction(SIGURG, &sa, nullptr);
  sigaction(SIGALRM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// How much of what the process holds is on huge pages says whether the manager's request for
// them (run/worker_env.h) took effect: copies from peers and first writes cost per page.
void ReportMemory(int rank) {
  const std::optional<ResidentMemory> memory = ReadResidentMemory();
  if (!memory) return;
  spdlog::info("rank {}: {:.1f} MB resident after the first step, {:.1f} MB of it on huge pages",
               rank, memory->resident_bytes / 1e6, memory->huge_page_bytes / 1e6);
  Emit(contract::message::Memory{rank, memory->resident_bytes, memory->huge_page_bytes});
}

// A setting's value as ManagerOverrides says it ("zero 1").
std::string Text(const std::string& value) { return value; }
std::string Text(int64_t value) { return std::to_string(value); }
std::string Text(int value) { return std::to_string(value); }
std::string Text(bool value) { return value ? "1" : "0"; }

// What `mitra run` set in the placement instead of what the program set: each setting the
// program changed from its default that the manager set to another value, as "checkpoint_every
// 100 (--checkpoint-every) instead of the program's 50". Said once, so that no setting is
// ignored in silence.
std::vector<std::string> ManagerOverrides(const TrainerOptions& program, const Placement& p) {
  const TrainerOptions defaults;
  std::vector<std::string> out;
  // The placement's `theirs`, when set, replaces the program's `mine`: said when the program
  // changed it from the default and the two differ.
  auto note = [&out](const auto& theirs, const auto& mine, const auto& by_default,
                     const char* name, const char* flag) {
    if (theirs && mine != by_default && mine != *theirs) {
      out.push_back(std::string(name) + " " + Text(*theirs) + " (" + flag +
                    ") instead of the program's " + Text(mine));
    }
  };
  const CheckpointOptions& ck = program.checkpoint;
  const RuntimeOptions& rt = program.runtime;
  const auto named = [](const std::string& name) {
    return name.empty() ? std::nullopt : std::optional<std::string>(name);
  };
  note(p.checkpoint_every, ck.every, defaults.checkpoint.every, "checkpoint_every",
       "--checkpoint-every");
  note(p.keep_checkpoints, int64_t{ck.keep}, int64_t{defaults.checkpoint.keep}, "keep_checkpoints",
       "--keep-checkpoints");
  note(named(p.checkpoint_dir), ck.dir, std::string(), "checkpoint_dir",
       "--checkpoint-dir, or the run directory's");
  note(p.max_steps, program.max_steps, defaults.max_steps, "max_steps", "--max-steps");
  note(p.global_batch, rt.global_batch, defaults.runtime.global_batch, "batch_size",
       "--batch-size");
  note(p.chunk_size, rt.chunk_size, defaults.runtime.chunk_size, "chunk_size",
       "--chunk-size, or the plan's");
  note(named(p.precision), std::string(contract::PrecisionName(rt.precision)),
       std::string(contract::PrecisionName(defaults.runtime.precision)), "precision",
       "--precision");
  note(p.zero, rt.zero != 0, defaults.runtime.zero != 0, "zero", "--zero, or the plan's");
  return out;
}

}  // namespace

Trainer::Trainer(cutpoint::ModelSpec spec, std::shared_ptr<const Dataset> dataset,
                 TrainerOptions options)
    : spec_(std::move(spec)), dataset_(std::move(dataset)), options_(std::move(options)) {}

Trainer::~Trainer() = default;

ParkedHolding Trainer::Holding() const {
  if (!held_ || held_->empty()) return {};
  return {held_->step, held_->first_segment, held_->end_segment, held_->Bytes()};
}

int Trainer::Run() {
  if (DescribeRequested()) {
    const ModelDescription model = DescribeModel(spec_);
    if (!model.independence.ok()) {
      spdlog::error("{}", model.independence.message());
      return 2;
    }
    contract::message::Describe described;
    described.segments = spec_.num_segments();
    described.tokens_per_sample = static_cast<double>(spec_.tokens_per_sample);
    described.micro_batch_independent = spec_.micro_batch_independent;
    described.parameters = model.parameters;
    described.buffers = model.buffers;
    Emit(described);
    return 0;
  }
  if (StandbyRequested()) return RunStandby();
  auto placement = Placement::FromEnvironment();
  return Run(std::move(placement));
}

int Trainer::RunStandby() {
  // Started ahead of a grow: everything up to here (the process, LibTorch, the program's data,
  // the segments of the stage it is meant for, the memory its first step takes) is ready when
  // the morph comes; the place in the grid comes with it.
  TuneMalloc();
  BuildAhead();
  Result<std::optional<Placement>> placement =
      AwaitPlacement(STDIN_FILENO, /*rank=*/-1, /*step=*/-1, kParkTimeoutS);
  if (!placement.ok()) return Run(placement.status());
  if (!*placement) return 0;
  return Run(std::move(**placement));
}

int Trainer::Run(Result<Placement> placement) {
  if (!placement.ok()) {
    spdlog::error("{}", placement.status().message());
    return 2;
  }
  torch::set_num_threads(placement->threads);
  TuneMalloc();
  InstallStopHandlers();
  // A worker started by the manager proves it is alive while it trains (and while it waits
  // for peers, writes checkpoints or is parked).
  StepTimes step_times;
  Heartbeat heartbeat(placement->rank, placement->standalone ? 0 : placement->heartbeat_s,
                      &step_times);
  Placement current = *placement;
  if (current.rank == 0 && !current.standalone) {
    if (const std::vector<std::string> over = ManagerOverrides(options_, current); !over.empty()) {
      const std::string message = "mitra run's settings replace the program's: " + Join(over, "; ");
      spdlog::info("{}", message);
      Emit(contract::message::SettingsReplaced{message});
    }
  }
  for (;;) {
    Ended ended;
    try {
      if (ProfileRequested()) return RunProfile(spec_, dataset_, options_.runtime, current);
      ended = Train(current, &step_times);
    } catch (const MicroBatchDependence& e) {
      spdlog::error("rank {}: {}", current.rank, e.what());
      return 2;  // bad input: the message says what to change
    } catch (const PeerError& e) {
      if (!current.park) {
        spdlog::error("rank {}: {}; stopping", current.rank, e.what());
        return 1;
      }
      // A peer failed. The process is not lost, and neither is the state of the steps this rank
      // completed (Train kept it): it parks, and the manager's recovery may keep it and heal
      // the failed rank's replacement from it.
      spdlog::error("rank {}: {}; parking for the next generation", current.rank, e.what());
      // Only a whole stage is worth announcing: a failure before the state was complete (in
      // the rendezvous, during the exchange) leaves parts of it taken or missing.
      if (held_ && !held_->Whole()) held_.reset();
      ended = Ended{0, true, held_ ? held_->step : -1};
    }
    if (ended.exit_code != 0 || !ended.asked_to_stop || !current.park) return ended.exit_code;
    Result<std::optional<Placement>> next =
        AwaitPlacement(STDIN_FILENO, current.rank, ended.step, kParkTimeoutS, Holding());
    if (!next.ok()) {
      spdlog::error("rank {}: {}", current.rank, next.status().message());
      return 2;
    }
    if (!*next) return 0;
    if (held_ && held_->step != (*next)->resume_step) held_.reset();  // of no use: free it now
    spdlog::info("rank {} of generation {} goes on as rank {} of generation {}", current.rank,
                 current.generation, (*next)->rank, (*next)->generation);
    current = std::move(**next);
    heartbeat.SetRank(current.rank);
    step_times.Take();  // the old place's steps are not the new rank's
    g_stop_requested = 0;
  }
}

void Trainer::BuildAhead() {
  const std::optional<contract::StandbyStage> hint = contract::StandbyStageOfProcess();
  if (!hint) return;
  const auto start = std::chrono::steady_clock::now();
  cutpoint::PartitionMethod method = options_.runtime.partition;
  if (!hint->partition.empty()) {
    Result<cutpoint::PartitionMethod> planned = cutpoint::ParsePartitionMethod(hint->partition);
    if (!planned.ok()) return;  // the placement will say so
    method = *planned;
  }
  const Result<cutpoint::Partition> partition =
      cutpoint::PartitionModel(spec_, method, hint->stages);
  if (!partition.ok()) return;
  held_ = std::make_unique<HeldState>();
  held_->built_seed = options_.runtime.seed;
  const int first = partition->FirstSegment(hint->stage), end = partition->EndSegment(hint->stage);
  int64_t parameter_bytes = 0;
  std::vector<torch::Tensor> parameters;
  for (int i = first; i < end; ++i) {
    held_->built[i] = cutpoint::BuildSegment(spec_, i, held_->built_seed);
    for (const torch::Tensor& p : held_->built[i]->parameters()) {
      parameter_bytes += p.numel() * p.element_size();
      parameters.push_back(p);
    }
  }
  // Before the heap is touched: the pool's buffers would take the pages the first step is to
  // find there.
  ReserveStaging(parameters);
  // Its first step allocates a few times the stage's parameters (their gradients, the
  // data-parallel buckets, the optimizer state arriving from peers, the update's temporaries):
  // as a new process it would fault every page in, on the path of the grow.
  TouchHeapAhead(4 * parameter_bytes);
  spdlog::info("standby: built segments {}..{} (stage {} of {}) and {:.1f} MB of checkpoint "
               "staging while waiting, in {:.2f} s",
               first, end - 1, hint->stage, hint->stages,
               StagingPool::OfProcess().kept_bytes() / 1e6,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void Trainer::ReserveStaging(const std::vector<torch::Tensor>& parameters) const {
  // Adam's two moments, say; a program's own optimizer is not built here (its code might not
  // expect it): its state's staging faults in at the save.
  int state_tensors = 0;
  if (!options_.runtime.optimizer.custom) {
    if (auto optimizer = MakeOptimizer(options_.runtime.optimizer, parameters); optimizer.ok()) {
      state_tensors = (*optimizer)->StateTensorsPerParameter();
    }
  }
  StagingPool::OfProcess().Reserve(parameters, 1 + state_tensors);
}

RuntimeOptions Trainer::RuntimeOptionsFor(const Placement& placement) const {
  RuntimeOptions runtime_options = options_.runtime;
  if (const char* trace = std::getenv("MITRA_TRACE_SAMPLES")) runtime_options.sample_trace = trace;
  // One step's trace: where the manager asks for it, else where the program does (a file per
  // rank when there are several).
  if (!placement.step_trace.empty()) {
    runtime_options.trace_path = placement.step_trace;
  } else if (!runtime_options.trace_path.empty() && placement.world_size() > 1) {
    std::string& path = runtime_options.trace_path;
    const size_t dot = path.rfind(".json");
    const std::string suffix = ".rank-" + std::to_string(placement.rank);
    path = dot == std::string::npos ? path + suffix : path.insert(dot, suffix);
  }
  return runtime_options;
}

void Trainer::Announce(const Placement& placement, const Runtime& rt) const {
  const RuntimeOptions& opts = rt.options();
  std::string segments;  // "[0, 3)", or one range per chunk: "[0, 2) [6, 8)"
  for (int c = 0; c < rt.stage().num_chunks(); ++c) {
    const auto [first, end] = rt.stage().chunk_segments(c);
    segments += (c > 0 ? " [" : "[") + std::to_string(first) + ", " + std::to_string(end) + ")";
  }
  spdlog::info("rank {} = stage {} replica {} of {}x{}: segments {} of {} ({} parameters), "
               "partition {}, schedule {}{}, {} micro-batches of <= {}",
               placement.rank, placement.stage(), placement.replica(), placement.num_stages(),
               placement.num_replicas(), segments, spec_.num_segments(),
               rt.stage().ParameterCount(), rt.pipelines().ToString(),
               planner::ScheduleName(opts.schedule), opts.recompute ? "+recompute" : "",
               rt.num_micro_batches(), opts.chunk_size);
  contract::message::Ready ready;
  ready.rank = placement.rank;
  ready.stages = placement.num_stages();
  ready.replicas = placement.num_replicas();
  ready.generation = placement.generation;
  ready.park = placement.park;
  ready.hold = rt.HoldsWholeState();
  Emit(ready);
  if (placement.rank != 0) return;
  const std::string settings = rt.DescribeSettings();
  spdlog::info("settings: {}", settings);
  contract::message::Settings told;
  told.text = settings;
  told.schedule = planner::ScheduleName(opts.schedule);
  told.recompute = opts.recompute;
  told.zero = rt.ShardsOptimizerState();
  told.partition = rt.pipelines().ToString();
  told.chunk_size = opts.chunk_size;
  Emit(told);
}

CheckpointOptions Trainer::CheckpointOptionsFor(const Placement& placement) const {
  CheckpointOptions ck = options_.checkpoint;
  if (!placement.checkpoint_dir.empty()) ck.dir = placement.checkpoint_dir;
  if (placement.checkpoint_every) ck.every = *placement.checkpoint_every;
  if (placement.keep_checkpoints) ck.keep = static_cast<int>(*placement.keep_checkpoints);
  return ck;
}

void Trainer::ReportStep(const Placement& placement, const Runtime& rt, int64_t step,
                         const StepResult& r, double seconds) const {
  const int64_t batch = rt.options().global_batch;
  const int64_t tokens_per_step = batch * spec_.tokens_per_sample;
  if (placement.rank == 0) {
    contract::message::Step trained;
    trained.step = step;
    trained.loss = r.loss;  // NaN: null
    trained.samples = batch;
    trained.samples_per_s = static_cast<double>(batch) / seconds;
    if (tokens_per_step > 0) {
      trained.tokens = tokens_per_step;
      trained.tokens_per_s = static_cast<double>(tokens_per_step) / seconds;
    }
    trained.step_time_s = seconds;
    trained.stages = placement.num_stages();
    trained.replicas = placement.num_replicas();
    trained.generation = placement.generation;
    trained.lr = r.lr;
    trained.grad_norm = r.grad_norm;
    if (r.loss_scale > 0) {
      trained.loss_scale = r.loss_scale;
      trained.skipped = r.skipped;
    }
    Emit(trained);
  }
  if (options_.log_every > 0 && step % options_.log_every == 0) {
    spdlog::info("step {} loss {:.4f} grad_norm {:.3f} lr {:.2e} {:.3f} s{}", step, r.loss,
                 r.grad_norm, r.lr, seconds,
                 r.skipped ? " (skipped: the gradients overflowed at loss scale " +
                                 std::to_string(r.loss_scale) + ")"
                           : "");
  }
  if (options_.on_step) {
    options_.on_step(StepInfo{step, r.loss, r.grad_norm, r.lr, seconds, placement.rank,
                              placement.stage(), placement.replica(), placement.num_stages(),
                              placement.num_replicas(), placement.generation});
  }
}

void Trainer::DumpParameters(const Placement& placement, const Runtime& rt) const {
  if (options_.dump_params.empty() ||
      (options_.dump_replica >= 0 && placement.replica() != options_.dump_replica)) {
    return;
  }
  std::filesystem::create_directories(options_.dump_params);
  std::string name = "stage-" + std::to_string(placement.stage());
  if (options_.dump_replica < 0) name += ".replica-" + std::to_string(placement.replica());
  SaveParameters(rt.stage(), options_.dump_params + "/" + name + ".pt");
}

Trainer::Ended Trainer::Train(const Placement& placement, StepTimes* times) {
  auto created =
      Runtime::Create(spec_, dataset_, placement, RuntimeOptionsFor(placement), held_.get());
  if (!created.ok()) {
    spdlog::error("rank {}: {}", placement.rank, created.status().message());
    held_.reset();  // what the stage took from it is gone with it
    return {created.status().code() == Status::Code::kInvalidArgument ? 2 : 1};
  }
  Runtime& rt = **created;
  if (held_ && held_->step < 0) held_.reset();  // built segments the stage did not take
  try {
    return Train(placement, rt, times);
  } catch (const PeerError&) {
    // Keep what this rank completed: a recovery may heal the failed rank from it.
    if (placement.park) held_ = std::make_unique<HeldState>(rt.Release());
    throw;
  }
}

Trainer::Ended Trainer::Train(const Placement& placement, Runtime& rt, StepTimes* times) {
  const int64_t max_steps = placement.max_steps.value_or(options_.max_steps);
  Announce(placement, rt);

  const CheckpointOptions ck = CheckpointOptionsFor(placement);
  std::unique_ptr<Checkpointer> checkpointer;
  if (!ck.dir.empty()) {
    if (Status s = checkpoint::CheckWritable(ck.dir); !s.ok()) {
      spdlog::error("rank {}: {}", placement.rank, s.message());
      return {2};
    }
    checkpointer = std::make_unique<Checkpointer>(rt, spec_, ck);
  }
  Resumed resumed = Resume(placement, rt, checkpointer.get());
  if (resumed.step < 0) return {resumed.exit_code};
  int64_t step = resumed.step;
  // The first save's memory, while the steps train; unless the first step is saved anyway,
  // which then allocates it off the path, while the second trains.
  if (checkpointer && !resumed.save) checkpointer->PrepareStaging();
  int64_t saved_step = step;

  const EvalOptions& eval = options_.eval;
  std::string reason = "max_steps";
  bool hold = false;
  const std::function<StopWish()> stop_requested = CurrentStopWish;
  while (step < max_steps) {
    const auto start = std::chrono::steady_clock::now();
    StepResult r;
    try {
      r = rt.Step(step, stop_requested);
    } catch (const PeerError&) {
      // The save in flight can never be complete: rank 0 must not wait for the lost peer's part.
      if (checkpointer) checkpointer->Abandon();
      throw;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++step;
    if (times != nullptr) times->Add(step, r.compute_s, r.wait_s);
    if (resumed.summary) ReportResume(placement, rt, *std::exchange(resumed.summary, nullptr));
    ReportStep(placement, rt, step, r, seconds);
    if (step == resumed.step + 1) {
      // Its optimizer state exists from the first update on: what this process holds (ZeRO-1
      // shards it over the stage's replicas).
      Emit(contract::message::OptimizerState{placement.rank, rt.OptimizerStateBytes(),
                                              rt.ShardsOptimizerState()});
      ReportMemory(placement.rank);
    }
    if (eval.dataset && ((eval.every > 0 && step % eval.every == 0) ||
                         (step == max_steps && !r.stop))) {
      Evaluate(rt, step);
    }
    // The state came from memory and storage has no copy of it: the first step's is written
    // in the background while the second trains (the resume step's could not be copied before
    // all of it had arrived, late in the first step).
    const bool save_first = resumed.save && step == resumed.step + 1;
    if (checkpointer && (save_first || (ck.every > 0 && step % ck.every == 0)) &&
        step < max_steps && !r.stop) {
      checkpointer->Save(step);
      saved_step = step;
    }
    if (r.stop) {
      reason = "signal";
      hold = r.hold && placement.park;
      break;
    }
  }
  if (resumed.summary) {  // no step ran: the state from peers arrives now
    rt.AwaitStateFromPeers();
    ReportResume(placement, rt, *std::exchange(resumed.summary, nullptr));
  }
  if (checkpointer) {
    // The final save is synchronous: Wait() returns when it is on disk. A morph whose next
    // generation takes the state from memory needs none (every rank skips it alike).
    if ((saved_step != step || (resumed.save && step == resumed.step)) && !hold) {
      checkpointer->Save(step);
    }
    if (Status s = checkpointer->Wait(); !s.ok()) {
      spdlog::error("rank {}: {}", placement.rank, s.message());
      return {1};
    }
  }
  DumpParameters(placement, rt);
  Emit(contract::message::Stopped{placement.rank, step, reason});
  if (reason == "signal" && placement.park) AwaitOwnStopSignal();
  // Parks when its stop signals asked it to park (SIGUSR2, SIGURG) and none to exit: with its
  // part of the checkpoint on disk, or, when the stop held the state, with the state in memory
  // (a late signal of that morph changes nothing: the all-reduce said what it was).
  const bool asked_to_park = (g_stop_requested & (kParkAfterStop | kHoldAfterStop)) != 0 &&
                             (g_stop_requested & kExitAfterStop) == 0;
  const bool park = reason == "signal" && placement.park &&
                    (hold || (asked_to_park && checkpointer != nullptr));
  if (park) held_ = std::make_unique<HeldState>(rt.Release());
  return {0, park, step};
}

Trainer::Resumed Trainer::Resume(const Placement& placement, Runtime& rt,
                                 Checkpointer* checkpointer) {
  int64_t step = placement.resume_step;
  if (!checkpointer && step > 0 && (placement.standalone || !held_)) {
    spdlog::error("rank {}: told to resume from step {} but no checkpoint directory is set "
                  "(MITRA_CHECKPOINT_DIR or the program's --checkpoint-dir)", placement.rank, step);
    return {-1, 2};
  }
  if (checkpointer && step == 0 && placement.standalone) {
    std::vector<std::string> skipped;
    auto found = checkpoint::FindNewestValid(checkpointer->options().dir, &skipped);
    for (const auto& why : skipped) spdlog::warn("{}", why);
    if (found.ok()) step = found->step;
  }
  if (step == 0) {
    rt.MarkRestored();
    return {0};
  }
  if (placement.standalone) return RestoreFromCheckpoint(placement, rt, checkpointer, step);
  return ResumeFromMemory(placement, rt, checkpointer);
}

Trainer::Resumed Trainer::RestoreFromCheckpoint(const Placement& placement, Runtime& rt,
                                                Checkpointer* checkpointer, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  if (Status s = checkpointer->Restore(step); !s.ok()) {
    spdlog::error("rank {}: cannot resume from step {}: {}", placement.rank, step, s.message());
    return {-1, 2};
  }
  rt.MarkRestored();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("rank {}: resumed from {} in {:.3f} s", placement.rank,
               checkpoint::StepDirectory(checkpointer->options().dir, step), seconds);
  if (placement.rank == 0) {
    contract::message::Restored restored;
    restored.step = step;
    restored.seconds = seconds;
    Emit(restored);
  }
  return {step};
}

Trainer::Resumed Trainer::ResumeFromMemory(const Placement& placement, Runtime& rt,
                                           Checkpointer* checkpointer) {
  const int64_t step = placement.resume_step;
  const bool complete = checkpointer != nullptr && checkpointer->Complete(step);
  const CheckpointReader read = [&](const std::vector<int>& segments, bool trainer_state) {
    if (!checkpointer) return Status::InvalidArgument("no checkpoint directory is set");
    return checkpointer->RestoreSegments(step, segments, trainer_state);
  };
  Result<ResumeSummary> summary = ResumeFromPeers(rt, held_.get(), complete, read);
  held_.reset();  // what no rank needed is freed
  if (!summary.ok()) {
    spdlog::error("rank {}: cannot resume from step {}: {}", placement.rank, step,
                  summary.status().message());
    // A damaged or another model's checkpoint is bad input; state that could not be found
    // is a failure the manager recovers from (from the newest checkpoint).
    return {-1, summary.status().code() == Status::Code::kInvalidArgument ? 2 : 1};
  }
  rt.MarkRestored();
  return {step, 0, checkpointer != nullptr && !summary->checkpoint_complete,
          std::make_shared<const ResumeSummary>(*summary)};
}

void Trainer::ReportResume(const Placement& placement, Runtime& rt, ResumeSummary summary) const {
  CompleteResumeSummary(rt, &summary);
  const double rate =
      summary.transfer_seconds > 0 ? summary.peer_bytes / summary.transfer_seconds : 0;
  spdlog::info("rank {}: resumed at step {} ({}): {} ranks kept their state, {} took it from "
               "peers ({:.1f} MB at {:.0f} MB/s, {:.1f} MB of it copied within a machine, the "
               "first step waiting {:.3f} s of it), {} from the checkpoint; training after "
               "{:.3f} s",
               placement.rank, placement.resume_step,
               StateSourceName(summary.rank_sources[placement.rank]), summary.kept, summary.peer,
               summary.peer_bytes / 1e6, rate / 1e6, summary.copied_bytes / 1e6,
               summary.first_step_wait_s, summary.checkpoint, summary.seconds);
  if (placement.rank != 0) return;
  contract::message::Restored restored;
  restored.step = placement.resume_step;
  restored.seconds = summary.seconds;
  restored.kept = summary.kept;
  restored.peer = summary.peer;
  restored.from_checkpoint = summary.checkpoint;
  restored.sources.emplace();
  for (const StateSource source : summary.rank_sources) {
    restored.sources->push_back(StateSourceName(source));
  }
  restored.peer_bytes = summary.peer_bytes;
  restored.transfer_s = summary.transfer_seconds;
  restored.peer_bytes_per_s = rate;
  restored.first_step_wait_s = summary.first_step_wait_s;
  Emit(restored);
}

void Trainer::Evaluate(Runtime& rt, int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const EvalResult result =
      rt.Evaluate(*options_.eval.dataset, options_.eval.metrics, options_.eval.max_samples,
                  options_.eval.chunk_size);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rt.placement().rank != 0) return;
  JsonObject metrics;
  std::string text;
  for (const auto& [name, value] : result.metrics) {
    metrics.SetNumber(name, value);
    text += fmt::format("  {} {:.4f}", name, value);
  }
  Emit(contract::message::Eval{step, result.samples, result.loss, seconds}, metrics);
  spdlog::info("eval after step {}: loss {:.4f}{} ({} samples, {:.2f} s)", step, result.loss, text,
               result.samples, seconds);
}

void SaveParameters(const Stage& stage, const std::string& path) {
  // CPU copies, so that the file loads anywhere (torch.load without map_location).
  const auto host = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU, false, true); };
  // The checkpoint's tensor-file writer: a dict of tensors and nothing else, which
  // torch.load(path, weights_only=True) reads (LibTorch's pickle_save writes typed-dict tags
  // that it refuses).
  auto writer = checkpoint::TorchZipWriter::Create(path);
  TORCH_CHECK(writer.ok(), writer.status().message());
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    const Status s = checkpoint::AddTensor(**writer, name, host(t));
    TORCH_CHECK(s.ok(), "could not write ", path, ": ", s.message());
  };
  for (const auto& p : stage.parameters()) add(p.name, p.tensor);
  for (const auto& b : stage.buffers()) add(b.name, b.tensor);
  const auto written = (*writer)->Finish();
  TORCH_CHECK(written.ok(), "could not write ", path, ": ", written.status().message());
}

}  // namespace mitra::worker
