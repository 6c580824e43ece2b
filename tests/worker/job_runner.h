// Test helper: runs a P x D job of a worker program as real local processes, the way the
// manager does (environment per docs/worker-contract.md), and collects what rank 0 reported.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/json.h"
#include "tests/common/run_helpers.h"  // MakeTempDir, ReadFileOrEmpty, WorkerRecords

namespace mitra::testing {

struct JobResult {
  std::vector<int> exit_codes;          // per rank; 128+signal for a signalled rank
  std::vector<double> losses;           // rank 0's step records, in order
  std::vector<JsonObject> records;      // rank 0's @mitra records, in order
  std::vector<std::string> rank_output; // each rank's stdout+stderr
  bool ok() const;
};

// Starts `program args...` as P*D processes on 127.0.0.1 and waits for all of them (killing
// them all after `timeout_s`). `extra_env` is added to every rank's environment.
JobResult RunJob(const std::string& program, int stages, int replicas,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& extra_env = {}, double timeout_s = 120);

// Loads a {name: tensor} dict written by worker::SaveParameters (or torch.save of a dict).
std::map<std::string, torch::Tensor> LoadTensorDict(const std::string& path);

}  // namespace mitra::testing
