// Helpers shared by the end-to-end tests that run the real GPT example under `mitra run`.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/common/run_helpers.h"

namespace mitra::testing {

// gpt_train with the tiny model and a fixed seed and learning rate, plus `extra`.
inline std::vector<std::string> GptArgs(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{MITRA_GPT_TRAIN, "--model", "tiny", "--seed", "11",
                                "--lr", "1e-3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The step records of metrics.jsonl (evaluation records carry eval_loss instead of loss).
inline std::vector<JsonObject> StepRecords(const std::vector<JsonObject>& metrics) {
  std::vector<JsonObject> out;
  for (const auto& m : metrics) {
    if (!m.Has("eval_loss")) out.push_back(m);
  }
  return out;
}

inline std::vector<double> Losses(const std::vector<JsonObject>& metrics) {
  std::vector<double> out;
  for (const auto& m : StepRecords(metrics)) out.push_back(m.GetNumber("loss").value_or(-1));
  return out;
}

inline void ExpectNoProcessLeft(const std::string& run_dir) {
  const auto pids = LaunchedPids(run_dir);
  EXPECT_FALSE(pids.empty());
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << "worker " << pid << " survived";
}

// step -> the dataset indices of that step's global batch, replicas in order, as traced by
// MITRA_TRACE_SAMPLES: each step as the newest generation that began it saw it (a step begun
// before a failure is trained again after the recovery, perhaps by other replicas).
inline std::map<int64_t, std::vector<int64_t>> ReadSampleTrace(const std::string& prefix) {
  // step -> generation -> replica -> indices
  std::map<int64_t, std::map<int64_t, std::map<int, std::vector<int64_t>>>> seen;
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  const std::string stem = prefix + ".gen-";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (path.rfind(stem, 0) != 0) continue;
    const int64_t generation = std::stoll(path.substr(stem.size()));
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      int64_t step = 0;
      int replica = 0;
      fields >> step >> replica;
      std::vector<int64_t>& slot = seen[step][generation][replica];
      slot.clear();
      for (int64_t i; fields >> i;) slot.push_back(i);
    }
  }
  std::map<int64_t, std::vector<int64_t>> out;
  for (auto& [step, generations] : seen) {
    for (auto& [replica, indices] : generations.rbegin()->second) {
      out[step].insert(out[step].end(), indices.begin(), indices.end());
    }
  }
  return out;
}

struct RunOutcome {
  testing::MitraResult result;
  std::vector<JsonObject> metrics;
};

// `mitra run` on `slots` local slots with `stages` stages, batch 16 in micro-batches of 4, into
// run directory `run_dir`. (MITRA_BINARY: defined by the test that includes this.)
inline RunOutcome MitraRun(const TempDir& tmp, const std::string& run_dir, int slots, int stages,
                           int64_t max_steps, const std::vector<std::string>& mitra_flags,
                           const std::vector<std::string>& program,
                           const std::map<std::string, std::string>& env = {}) {
  const std::string machines =
      tmp.Write("machines-" + std::to_string(slots) + ".txt",
                "localhost slots=" + std::to_string(slots) + "\n");
  std::vector<std::string> args{"run", "--machines", machines, "--batch-size", "16",
                                "--nstages", std::to_string(stages), "--chunk-size", "4",
                                "--max-steps", std::to_string(max_steps), "--run-dir", run_dir};
  args.insert(args.end(), mitra_flags.begin(), mitra_flags.end());
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  RunOutcome run;
  run.result = testing::RunProgram(MITRA_BINARY, args, tmp.path(), 180, env);
  run.metrics = testing::ReadJsonLines(run_dir + "/metrics.jsonl");
  return run;
}

}  // namespace mitra::testing
