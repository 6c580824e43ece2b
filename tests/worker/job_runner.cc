#include "tests/worker/job_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/free_port.h"
#include "mitra/contract/stage_map.h"
#include "rendezvous/job_token.h"
#include "tests/common/run_helpers.h"

namespace mitra::testing {
namespace fs = std::filesystem;

bool JobResult::ok() const {
  for (int c : exit_codes) {
    if (c != 0) return false;
  }
  return !exit_codes.empty();
}

JobResult RunJob(const std::string& program, int stages, int replicas,
                 const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& extra_env, double timeout_s) {
  const int world = stages * replicas;
  const std::string map = contract::StageMap::Default(stages, replicas).ToString();
  const int port = *PickFreeTcpPort("127.0.0.1");
  const std::string dir = MakeTempDir("mitra-job");
  const std::string token = rendezvous::JobToken::Generate().Hex();  // the job's, as mitra run makes
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::map<std::string, std::string> env = extra_env;
    env["MITRA_RANK"] = std::to_string(rank);
    env["MITRA_LOCAL_RANK"] = std::to_string(rank);
    env["MITRA_STAGE_TO_RANK_MAP"] = map;
    env["MITRA_RDZV_HOST"] = "127.0.0.1";
    env["MITRA_RDZV_PORT"] = std::to_string(port);
    if (!env.count("MITRA_JOB_TOKEN")) env["MITRA_JOB_TOKEN"] = token;
    env["MITRA_HOST"] = "127.0.0.1";
    if (!env.count("MITRA_TIMEOUT_S")) env["MITRA_TIMEOUT_S"] = "30";
    const std::string log = dir + "/rank-" + std::to_string(rank) + ".log";
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(program.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  JobResult result;
  result.exit_codes.assign(world, -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int remaining = world;
  while (remaining > 0) {
    for (int rank = 0; rank < world; ++rank) {
      if (result.exit_codes[rank] != -1) continue;
      int status = 0;
      if (waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        result.exit_codes[rank] =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        --remaining;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < world; ++rank) {
        if (result.exit_codes[rank] == -1) {
          kill(pids[rank], SIGKILL);
          waitpid(pids[rank], nullptr, 0);
          result.exit_codes[rank] = 128 + SIGKILL;
          --remaining;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int rank = 0; rank < world; ++rank) {
    result.rank_output.push_back(ReadFileOrEmpty(dir + "/rank-" + std::to_string(rank) + ".log"));
  }
  result.records = WorkerRecords(result.rank_output[0]);
  for (const JsonObject& record : result.records) {
    if (record.GetString("event") == "step") result.losses.push_back(*record.GetNumber("loss"));
  }
  fs::remove_all(dir);
  return result;
}

std::map<std::string, torch::Tensor> LoadTensorDict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty()) throw std::runtime_error("cannot read " + path);
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : torch::pickle_load(bytes).toGenericDict()) {
    out[item.key().toStringRef()] = item.value().toTensor();
  }
  return out;
}

}  // namespace mitra::testing
