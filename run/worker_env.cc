#include "run/worker_env.h"

#include "common/file_system.h"
#include "contract/variables.h"
#include "records/records.h"
#include "rendezvous/job_token.h"

namespace mitra::run {
namespace {

Environment WithoutContract(const Environment& base) {
  Environment env = base;
  for (const char* name : contract::kManagedVariables) env.erase(name);
  return env;
}

// Asks glibc's malloc (2.35 and later; older ones ignore it) to put the memory it takes from
// the system on transparent huge pages, where the kernel leaves them to madvise(): a worker's
// parameters, gradients and activations then sit on 2 MiB pages instead of 4 KiB ones. A page's
// first use, by the process or by the kernel on its behalf (a copy from a peer, a receive from
// the network), costs per page, and on some virtual machines dearly (docs/performance.md).
// A setting of the user's own, or MITRA_MALLOC_TUNING=0, is left as it is.
void AskForHugePages(Environment& env) {
  static constexpr char kTunables[] = "GLIBC_TUNABLES", kHugePages[] = "glibc.malloc.hugetlb";
  if (auto it = env.find(contract::kMallocTuning); it != env.end() && it->second == "0") return;
  std::string& tunables = env[kTunables];
  if (tunables.find(kHugePages) != std::string::npos) return;
  tunables += (tunables.empty() ? "" : ":") + std::string(kHugePages) + "=1";
}

}  // namespace

contract::Placement JobPlacement() {
  contract::Placement p;
  p.job_token = rendezvous::JobToken::Generate().Hex();
  return p;
}

std::vector<std::string> SecretVariables() { return {contract::kJobToken}; }

Environment WorkerEnvironment(const Environment& base, const GridPlan& plan,
                              const RankPlacement& placement, const std::string& host,
                              const LaunchSettings& settings) {
  contract::Placement p = settings.placement;
  p.rank = placement.rank;
  p.local_rank = placement.local_rank;
  p.host = host;
  p.stage_map = plan.stage_map;
  if (plan.chunk_size > 0) p.chunk_size = plan.chunk_size;
  if (plan.global_batch > 0) p.global_batch = plan.global_batch;
  if (plan.schedule) {
    p.schedule = planner::ScheduleName(*plan.schedule);
    p.recompute = plan.recompute;
    p.zero = plan.zero;
  }
  p.partition = plan.partition;
  p.shares = plan.shares;
  if (!settings.trace_dir.empty()) {
    p.step_trace = JoinPath(settings.trace_dir, records::StepTraceName(placement.rank));
  }
  Environment env = WithoutContract(base);
  for (auto& [name, value] : p.ToEnvironment()) env[name] = std::move(value);
  return env;
}

Environment RemoteEnvironment(const Environment& base) {
  static const char* const kNames[] = {"PATH", "LD_LIBRARY_PATH", "LANG", "TZ", "PYTHONPATH",
                                          "GLIBC_TUNABLES"};
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
  AskForHugePages(w.local_environment);
  AskForHugePages(w.remote_environment);
  w.working_directory = std::move(working_directory);
  w.code_dir = std::move(code_dir);
  return w;
}

Environment DescribeEnvironment(const Environment& base) {
  Environment env = WithoutContract(base);
  env[contract::kDescribe] = "1";
  return env;
}

Environment StandbyEnvironment(const Environment& base, const std::string& run_dir,
                               const std::optional<contract::StandbyStage>& stage) {
  Environment env = WithoutContract(base);
  env[contract::kStandby] = "1";
  if (stage) env[contract::kStandbyStage] = stage->ToString();
  env[contract::kRunDir] = run_dir;  // how leftover workers of the run are found (orphans.h)
  return env;
}

}  // namespace mitra::run
