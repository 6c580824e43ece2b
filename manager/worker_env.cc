#include "manager/worker_env.h"

#include <charconv>

namespace mitra::manager {
namespace {

// The variables of docs/worker-contract.md, and MITRA_DESCRIBE.
constexpr const char* kContractVariables[] = {
    "MITRA_RANK",        "MITRA_LOCAL_RANK",   "MITRA_WORLD_SIZE",    "MITRA_STAGE_TO_RANK_MAP",
    "MITRA_CHUNK_SIZE",  "MITRA_GLOBAL_BATCH", "MITRA_REPLICA_BATCH", "MITRA_MAX_STEPS",
    "MITRA_RESUME_STEP", "MITRA_RDZV_HOST",    "MITRA_RDZV_PORT",     "MITRA_GENERATION",
    "MITRA_HOST",        "MITRA_THREADS",      "MITRA_TIMEOUT_S",     "MITRA_RUN_DIR",
    "MITRA_DESCRIBE",    "MITRA_CHECKPOINT_DIR", "MITRA_CHECKPOINT_EVERY", "MITRA_KEEP_CHECKPOINTS",
    "MITRA_SCHEDULE",    "MITRA_RECOMPUTE",    "MITRA_PARTITION",     "MITRA_PROFILE",
    "MITRA_PROFILE_MACHINES", "MITRA_PROFILE_SLOTS", "MITRA_PROFILE_MICRO_BATCHES",
    "MITRA_PROFILE_REPEATS", "MITRA_STEP_TRACE",
};

Environment WithoutContract(const Environment& base) {
  Environment env = base;
  for (const char* name : kContractVariables) env.erase(name);
  return env;
}

}  // namespace

Environment WorkerEnvironment(const Environment& base, const GridPlan& plan,
                              const RankPlacement& placement, const std::string& host,
                              const LaunchSettings& settings) {
  Environment env = WithoutContract(base);
  env["MITRA_RANK"] = std::to_string(placement.rank);
  env["MITRA_LOCAL_RANK"] = std::to_string(placement.local_rank);
  env["MITRA_WORLD_SIZE"] = std::to_string(plan.world_size());
  env["MITRA_STAGE_TO_RANK_MAP"] = plan.stage_to_rank_map;
  env["MITRA_CHUNK_SIZE"] = std::to_string(plan.chunk_size);
  env["MITRA_GLOBAL_BATCH"] = std::to_string(plan.global_batch);
  env["MITRA_MAX_STEPS"] = std::to_string(settings.max_steps);
  env["MITRA_RESUME_STEP"] = std::to_string(settings.resume_step);
  env["MITRA_RDZV_HOST"] = settings.rdzv_host;
  env["MITRA_RDZV_PORT"] = std::to_string(settings.rdzv_port);
  env["MITRA_GENERATION"] = std::to_string(settings.generation);
  env["MITRA_HOST"] = host;
  env["MITRA_THREADS"] = std::to_string(settings.threads);
  env["MITRA_TIMEOUT_S"] = FormatSeconds(settings.timeout_s);
  env["MITRA_RUN_DIR"] = settings.run_dir;
  env["MITRA_CHECKPOINT_DIR"] = settings.checkpoint_dir;
  env["MITRA_CHECKPOINT_EVERY"] = std::to_string(settings.checkpoint_every);
  env["MITRA_KEEP_CHECKPOINTS"] = std::to_string(settings.keep_checkpoints);
  if (!plan.schedule.empty()) {
    env["MITRA_SCHEDULE"] = plan.schedule;
    env["MITRA_RECOMPUTE"] = plan.recompute ? "1" : "0";
  }
  if (!plan.partition.empty()) env["MITRA_PARTITION"] = plan.partition;
  if (!settings.trace_dir.empty()) {
    env["MITRA_STEP_TRACE"] =
        settings.trace_dir + "/rank-" + std::to_string(placement.rank) + ".trace.json";
  }
  return env;
}

Environment RemoteEnvironment(const Environment& base) {
  static const char* const kNames[] = {"PATH", "LD_LIBRARY_PATH", "LANG", "TZ", "PYTHONPATH"};
  static const char* const kPrefixes[] = {"LC_",     "OMP_",  "MKL_",  "OPENBLAS_",
                                          "GLOO_",   "NCCL_", "CUDA_", "MITRA_"};
  Environment env;
  for (const auto& [name, value] : base) {
    bool keep = false;
    for (const char* n : kNames) keep |= name == n;
    for (const char* p : kPrefixes) keep |= name.rfind(p, 0) == 0;
    if (keep) env[name] = value;
  }
  return env;
}

WorkerProgram WorkerProgram::Make(std::string program, std::vector<std::string> args,
                                  const Environment& manager,
                                  const std::vector<std::pair<std::string, std::string>>& overrides,
                                  std::string working_directory, std::string code_dir) {
  WorkerProgram w;
  w.program = std::move(program);
  w.args = std::move(args);
  w.local_environment = manager;
  w.remote_environment = RemoteEnvironment(manager);
  for (const auto& [key, value] : overrides) {
    w.local_environment[key] = value;
    w.remote_environment[key] = value;
  }
  w.working_directory = std::move(working_directory);
  w.code_dir = std::move(code_dir);
  return w;
}

Environment DescribeEnvironment(const Environment& base) {
  Environment env = WithoutContract(base);
  env["MITRA_DESCRIBE"] = "1";
  return env;
}

std::string FormatSeconds(double seconds) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), seconds);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(seconds);
}

}  // namespace mitra::manager
