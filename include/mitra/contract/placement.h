// The worker contract's environment (docs/worker-contract.md), written and read in one place:
// a worker's place in the pipeline x data-parallel grid and what the manager asks of it.
//
// The manager fills a Placement per rank and writes it with ToEnvironment(); the worker reads it
// back with one call to Placement::FromEnvironment(). A program started by hand, without
// MITRA_RANK, gets a 1 x 1 placement with a free local rendezvous port, so the same binary runs
// alone for debugging. Nothing here depends on LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "mitra/contract/stage_map.h"

namespace mitra::contract {

using Environment = std::map<std::string, std::string>;

// A setting the manager may leave to the program is a std::optional (or, for a name or a
// path, empty): unset, its variable is absent and the program's own setting holds.
struct Placement {
  int rank = 0;
  int local_rank = 0;
  StageMap stage_map = StageMap::Default(1, 1);
  std::optional<int> chunk_size;        // micro-batch size
  std::optional<int64_t> global_batch;  // in samples
  std::optional<int64_t> max_steps;
  int64_t resume_step = 0;
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 0;
  // MITRA_JOB_TOKEN: the job's secret, which every rank must hold alike (64 hex digits); empty
  // in a program run alone, whose store then makes one of its own (worker/comm/job_store.h).
  std::string job_token;
  int64_t generation = 0;
  std::string host = "127.0.0.1";  // address Gloo binds to
  int threads = 1;                 // LibTorch intra-op threads
  double timeout_s = 30;           // every blocking wait
  double heartbeat_s = 1;          // between heartbeat records; 0: none
  std::string run_dir;
  std::string checkpoint_dir;
  std::optional<int64_t> checkpoint_every;  // 0: only at the end and on stop
  std::optional<int64_t> keep_checkpoints;  // 0: every one
  bool standalone = true;          // not started by the manager
  // The planner's choices (MITRA_SCHEDULE, MITRA_RECOMPUTE, MITRA_PARTITION).
  std::string schedule;
  std::optional<bool> recompute;
  std::string partition;
  // MITRA_SHARES ("5,3"): each data-parallel replica's micro-batches of a step; empty: even
  // (mitra/planner/batch_split.h).
  std::vector<int64_t> shares;
  std::string step_trace;  // where to write one step's chrome trace; "": the program's own
  // The manager can send the next placement on standard input (MITRA_PARK=1): after a stop it
  // asked for, with its checkpoint on disk, the worker may park and wait for one instead of
  // exiting (worker/parking.h).
  bool park = false;
  // MITRA_PRECISION (fp32 | bf16 | fp16) and MITRA_DEVICE (cpu | cuda): what `mitra run
  // --precision` asked for.
  std::string precision;
  std::string device;
  std::optional<bool> zero;  // MITRA_ZERO: ZeRO-1

  int stage() const { return stage_map.PositionOf(rank).stage; }
  int replica() const { return stage_map.PositionOf(rank).replica; }
  int num_stages() const { return stage_map.num_stages(); }
  int num_replicas() const { return stage_map.num_replicas(); }
  int world_size() const { return stage_map.world_size(); }

  // Reads the MITRA_* variables of the process's environment. Malformed values are an
  // InvalidArgument naming the variable.
  static Result<Placement> FromEnvironment();
  // The same, from `env`.
  static Result<Placement> FromEnvironment(const Environment& env);

  // The variables a manager sets for this placement (every field; the unset ones and the
  // empty names are left out).
  Environment ToEnvironment() const;
};

// What `mitra profile` asks each worker to measure, instead of training (MITRA_PROFILE=1).
struct ProfileRequest {
  std::vector<std::string> machines;  // every machine's address, in list order
  std::vector<int> slots;             // per machine
  std::vector<int64_t> micro_batches = {1, 2, 4, 8, 16};
  int repeats = 5;

  // Present only when MITRA_PROFILE=1. InvalidArgument names a malformed variable.
  static Result<ProfileRequest> FromEnvironment(const Environment& env);
  Environment ToEnvironment() const;  // MITRA_PROFILE=1 and the rest
};

// True when the manager asked the program only to describe itself (MITRA_DESCRIBE=1).
bool DescribeRequested();
// True when the manager asked the program to profile (MITRA_PROFILE=1).
bool ProfileRequested();
// True when the manager started the program ahead of a grow, to park until it is given a place
// (MITRA_STANDBY=1, contract/park.h).
bool StandbyRequested();

// The stage a standby worker is meant for (MITRA_STANDBY_STAGE): stage `stage` of `stages`,
// with `partition` as MITRA_PARTITION would give it ("": the program's own).
struct StandbyStage {
  int stage = 0, stages = 1;
  std::string partition;

  std::string ToString() const;  // the variable's value
  // Nullopt when the text is not "S/P" or "S/P/<partition>" with 0 <= S < P: a hint, ignored.
  static std::optional<StandbyStage> Parse(const std::string& text);
};
// This process's MITRA_STANDBY_STAGE; nullopt when unset or malformed.
std::optional<StandbyStage> StandbyStageOfProcess();

// The process's environment as a map.
Environment ProcessEnvironment();

}  // namespace mitra::contract
