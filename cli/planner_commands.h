// `mitra profile` and `mitra plan`: measuring what a program costs on a machine list, and
// ranking the shapes it could train in (docs/planner.md).
//
//   mitra profile --machines FILE --batch-size B --out DIR [--micro-batches 1,2,4,8,16]
//                 [--repeats N] [flags] -- PROGRAM [ARGS...]
//   mitra plan --profile DIR --batch-size B (--slots N | --machines FILE) [--top K] [--json]
//              [--nstages P] [--chunk-size M] [--trace FILE]
//   mitra plan --validate RUN_DIR [--generation G] [--profile DIR]
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/file_system.h"
#include "mitra/common/status.h"
#include "planner/profile.h"
#include "run/transports.h"
#include "run/worker_env.h"

namespace mitra::cli {

struct ProfileCommandOptions {
  std::string machines_path;
  int64_t batch_size = 0;
  std::string out_dir;
  std::vector<int64_t> micro_batches = {1, 2, 4, 8, 16};
  int repeats = 5;
  int gpus_per_node = 1;
  int threads = 1;
  double timeout_s = 600;
  std::string code_dir;
  std::vector<std::pair<std::string, std::string>> env;
  std::string known_hosts, identity;
  std::string program;
  std::vector<std::string> program_args;
  std::string help_text;  // non-empty for --help: print it, exit 0
};

struct PlanCommandOptions {
  std::string profile_dir;
  int64_t batch_size = 0;
  int slots = 0;               // --slots N, or
  std::string machines_path;   // --machines FILE
  int gpus_per_node = 1;
  int top = 10;
  bool json = false;
  int stages = 0;              // --nstages: only this P
  int chunk_size = 0;          // --chunk-size: only this micro-batch
  std::string trace_path;      // --trace: the best shape's predicted step as a chrome trace
  std::string validate_dir;    // --validate RUN_DIR: predicted against measured
  int64_t generation = -1;     // --generation G of --validate (default: the newest)
  std::string help_text;       // non-empty for --help: print it, exit 0
};

// Parse argv after the command's name (with flags.h). InvalidArgument names the flag and the
// fix.
Result<ProfileCommandOptions> ParseProfileCommand(const std::vector<std::string>& args);
Result<PlanCommandOptions> ParsePlanCommand(const std::vector<std::string>& args);
std::string ProfileUsage();
std::string PlanUsage();

// What the commands need from the process.
struct CommandContext {
  FileSystem* fs = nullptr;
  run::Transports* transports = nullptr;
  launcher::ProcessRunner* runner = nullptr;  // to resolve the program
  Clock* clock = nullptr;
  contract::Environment environment;
  std::string working_directory;
  std::ostream* out = nullptr;
  std::ostream* err = nullptr;
};

// Exit codes as `mitra run`'s: 0 done, 1 failed, 2 bad input.
int ProfileCommand(const ProfileCommandOptions& options, CommandContext& c);
int PlanCommand(const PlanCommandOptions& options, CommandContext& c);
// --validate: the run's shape simulated with the profile, against its metrics and step traces.
int ValidateCommand(const PlanCommandOptions& options, CommandContext& c);

}  // namespace mitra::cli
