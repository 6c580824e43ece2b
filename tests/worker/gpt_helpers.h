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
#include "tests/manager/run_helpers.h"

namespace mitra::testing {

// gpt_train with the tiny model and a fixed seed and learning rate, plus `extra`.
inline std::vector<std::string> GptArgs(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{MITRA_GPT_TRAIN, "--model", "tiny", "--seed", "11",
                                "--lr", "1e-3"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

inline std::vector<double> Losses(const std::vector<JsonObject>& metrics) {
  std::vector<double> out;
  for (const auto& m : metrics) out.push_back(m.GetNumber("loss").value_or(-1));
  return out;
}

inline void ExpectNoProcessLeft(const std::string& run_dir) {
  const auto pids = LaunchedPids(run_dir);
  EXPECT_FALSE(pids.empty());
  for (pid_t pid : pids) EXPECT_TRUE(ProcessGone(pid)) << "worker " << pid << " survived";
}

// step -> the dataset indices of that step's global batch, replicas in order.
inline std::map<int64_t, std::vector<int64_t>> ReadSampleTrace(const std::string& prefix) {
  std::map<int64_t, std::map<int, std::vector<int64_t>>> by_replica;
  const std::filesystem::path dir = std::filesystem::path(prefix).parent_path();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().string().rfind(prefix + ".rank-", 0) != 0) continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      int64_t step = 0;
      int replica = 0;
      fields >> step >> replica;
      std::vector<int64_t>& slot = by_replica[step][replica];
      slot.clear();  // a step re-run after a resume replaces what it recorded
      for (int64_t i; fields >> i;) slot.push_back(i);
    }
  }
  std::map<int64_t, std::vector<int64_t>> out;
  for (auto& [step, replicas] : by_replica) {
    for (auto& [replica, indices] : replicas) {
      out[step].insert(out[step].end(), indices.begin(), indices.end());
    }
  }
  return out;
}

}  // namespace mitra::testing
