// The names of the worker contract's environment variables (docs/worker-contract.md), spelled
// once: the manager writes them (run/worker_env.h, run/profile_job.h) and the worker
// reads them (mitra/contract/placement.h, worker/profiler.cc, worker/heartbeat.cc).
#pragma once

namespace mitra::contract {

// A worker's place in the job (mitra/contract/placement.h).
inline constexpr char kRank[] = "MITRA_RANK";
inline constexpr char kLocalRank[] = "MITRA_LOCAL_RANK";
inline constexpr char kWorldSize[] = "MITRA_WORLD_SIZE";
inline constexpr char kStageToRankMap[] = "MITRA_STAGE_TO_RANK_MAP";
inline constexpr char kChunkSize[] = "MITRA_CHUNK_SIZE";
inline constexpr char kGlobalBatch[] = "MITRA_GLOBAL_BATCH";
inline constexpr char kMaxSteps[] = "MITRA_MAX_STEPS";
inline constexpr char kResumeStep[] = "MITRA_RESUME_STEP";
inline constexpr char kRdzvHost[] = "MITRA_RDZV_HOST";
inline constexpr char kRdzvPort[] = "MITRA_RDZV_PORT";
inline constexpr char kGeneration[] = "MITRA_GENERATION";
// The job's secret, 64 hex digits (rendezvous/job_token.h, docs/security.md): every connection
// to the job's rendezvous store proves it. Never on a command line (launcher/process_runner.h:
// ProcessSpec::secrets).
inline constexpr char kJobToken[] = "MITRA_JOB_TOKEN";
inline constexpr char kHost[] = "MITRA_HOST";
inline constexpr char kThreads[] = "MITRA_THREADS";
inline constexpr char kTimeoutS[] = "MITRA_TIMEOUT_S";
inline constexpr char kRunDir[] = "MITRA_RUN_DIR";
inline constexpr char kCheckpointDir[] = "MITRA_CHECKPOINT_DIR";
inline constexpr char kCheckpointEvery[] = "MITRA_CHECKPOINT_EVERY";
inline constexpr char kKeepCheckpoints[] = "MITRA_KEEP_CHECKPOINTS";
inline constexpr char kHeartbeatS[] = "MITRA_HEARTBEAT_S";
inline constexpr char kSchedule[] = "MITRA_SCHEDULE";
inline constexpr char kRecompute[] = "MITRA_RECOMPUTE";
inline constexpr char kPartition[] = "MITRA_PARTITION";
// Each data-parallel replica's micro-batches, "5,3" (mitra/planner/batch_split.h); unset: even.
inline constexpr char kShares[] = "MITRA_SHARES";
inline constexpr char kStepTrace[] = "MITRA_STEP_TRACE";
// "1": the manager can send this worker its next placement on standard input, so after a stop
// it asked for, the worker may park instead of exiting (docs/worker-contract.md).
inline constexpr char kPark[] = "MITRA_PARK";
// "1": a worker started ahead of a grow, with no place yet: it loads, parks at once and waits
// for its placement on standard input.
inline constexpr char kStandby[] = "MITRA_STANDBY";
// "S/P", or "S/P/<partition>" when the planner chose one: the stage of a P-stage grid a standby
// worker started for a grow is meant for. It builds that stage's segments while it waits; its
// placement, when it comes, decides (mitra/contract/placement.h: StandbyStage).
inline constexpr char kStandbyStage[] = "MITRA_STANDBY_STAGE";
inline constexpr char kPrecision[] = "MITRA_PRECISION";
inline constexpr char kDevice[] = "MITRA_DEVICE";
// "1": shard the optimizer state over each stage's replicas (ZeRO-1); "0": do not.
inline constexpr char kZero[] = "MITRA_ZERO";

// Requests instead of training.
inline constexpr char kDescribe[] = "MITRA_DESCRIBE";
inline constexpr char kProfile[] = "MITRA_PROFILE";
inline constexpr char kProfileMachines[] = "MITRA_PROFILE_MACHINES";
inline constexpr char kProfileSlots[] = "MITRA_PROFILE_SLOTS";
inline constexpr char kProfileMicroBatches[] = "MITRA_PROFILE_MICRO_BATCHES";
inline constexpr char kProfileRepeats[] = "MITRA_PROFILE_REPEATS";

// "0": a worker keeps glibc's malloc as it comes: no mallopt() at start (worker/heap.h) and
// no huge pages asked for its heap (run/worker_env.h). A debugging setting a user may give.
inline constexpr char kMallocTuning[] = "MITRA_MALLOC_TUNING";

// What the --preemption-command is told: the machine it runs for, as the list writes it.
inline constexpr char kMachine[] = "MITRA_MACHINE";

// Every variable the manager sets. A worker's environment never inherits one of these from the
// manager's own (a MITRA_RANK left in the user's shell must not reach a worker); the debugging
// settings a user may give (MITRA_TRACE_SAMPLES, MITRA_MALLOC_TUNING) are not among them.
inline constexpr const char* kManagedVariables[] = {
    kRank,           kLocalRank,       kWorldSize,         kStageToRankMap, kChunkSize,
    kGlobalBatch,    kMaxSteps,        kResumeStep,        kRdzvHost,       kRdzvPort,
    kGeneration,     kHost,            kThreads,           kTimeoutS,       kRunDir,
    kCheckpointDir,  kCheckpointEvery, kKeepCheckpoints,   kHeartbeatS,     kSchedule,
    kRecompute,      kPartition,       kStepTrace,         kPark,           kStandby,
    kDescribe,       kProfile,
    kProfileMachines, kProfileSlots,   kProfileMicroBatches, kProfileRepeats, kMachine,
    kPrecision,      kDevice,          kZero,              kStandbyStage,   kShares,
    kJobToken,
};

}  // namespace mitra::contract
