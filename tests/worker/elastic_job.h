// The GPT job of the elastic end-to-end tests, and its uninterrupted reference: whatever happens
// to a run (list edits, killed or hung workers, lost machines, a restarted manager), every step
// it trains must have the reference's loss, and the steps together the reference's samples.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/manager/run_helpers.h"
#include "tests/worker/gpt_helpers.h"

namespace mitra::testing {

inline constexpr double kElasticLossTolerance = 2e-5;  // fp32 reordering, see fidelity_test.cc

struct ElasticJob {
  int64_t batch_size = 16;
  int64_t steps = 40;
};

// `mitra run` arguments for the job on `machines` with `stages` stages, plus `flags`.
inline std::vector<std::string> RunArgs(const ElasticJob& job, const std::string& machines,
                                        const std::string& run_dir, int stages,
                                        const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args{"run",          "--machines", machines,
                                "--batch-size", std::to_string(job.batch_size),
                                "--nstages",    std::to_string(stages),
                                "--chunk-size", "4",
                                "--max-steps",  std::to_string(job.steps),
                                "--run-dir",    run_dir};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  for (const std::string& a : GptArgs()) args.push_back(a);
  return args;
}

// Replaces `name` in `tmp` the way editors do: a new file renamed over the old one.
inline void RewriteFile(const TempDir& tmp, const std::string& name, const std::string& contents) {
  const std::string staged = tmp.Write(name + ".new", contents);
  ASSERT_EQ(std::rename(staged.c_str(), tmp.Path(name).c_str()), 0);
}

struct Reference {
  std::vector<double> losses;  // by step - 1
  std::map<int64_t, std::vector<int64_t>> samples;
};

// The job trained once, 1 x 1 on localhost, without interruption. Every test of a job compares
// with the same run, so it is kept on disk for the test processes that follow (keyed by the job
// and by the gpt_train and mitra binaries it ran, so a rebuild runs it again).
inline const Reference& Uninterrupted(const ElasticJob& job) {
  static std::map<std::pair<int64_t, int64_t>, Reference> cache;
  const auto key = std::make_pair(job.batch_size, job.steps);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  namespace fs = std::filesystem;
  std::string stamp;
  for (const char* binary : {MITRA_GPT_TRAIN, MITRA_BINARY}) {
    std::error_code ec;
    const auto time = fs::last_write_time(binary, ec).time_since_epoch().count();
    stamp += "-" + std::to_string(time) + "-" + std::to_string(fs::file_size(binary, ec));
  }
  const fs::path kept = fs::temp_directory_path() /
                        ("mitra-elastic-reference-" + std::to_string(job.batch_size) + "-" +
                         std::to_string(job.steps) + stamp);
  if (!fs::exists(kept / "run" / "metrics.jsonl")) {
    TempDir tmp;
    const std::string machines = tmp.Write("machines.txt", "localhost slots=1\n");
    const MitraResult r = RunProgram(MITRA_BINARY, RunArgs(job, machines, tmp.Path("run"), 1),
                                     tmp.path(), 300, {{"MITRA_TRACE_SAMPLES", tmp.Path("trace")}});
    EXPECT_EQ(r.exit_code, 0) << r.output();
    if (r.exit_code == 0) {
      const fs::path staged = kept.string() + ".new." + std::to_string(::getpid());
      fs::create_directories(staged);
      fs::copy(tmp.path(), staged, fs::copy_options::recursive);
      std::error_code ec;
      fs::rename(staged, kept, ec);  // another process may have won: either copy is right
      if (ec) fs::remove_all(staged, ec);
    }
  }
  Reference& ref = cache[key];
  ref.losses = Losses(ReadJsonLines((kept / "run" / "metrics.jsonl").string()));
  ref.samples = ReadSampleTrace((kept / "trace").string());
  return ref;
}

// Every step in run_dir's metrics.jsonl has the uninterrupted job's loss, the last is the job's
// last step, and the samples traced equal the reference's. With `consecutive`, each step appears
// exactly once, in order (a planned morph re-trains nothing).
inline void ExpectSameTraining(const ElasticJob& job, const std::string& run_dir,
                               const std::string& trace, bool consecutive) {
  const Reference& ref = Uninterrupted(job);
  ASSERT_EQ(ref.losses.size(), static_cast<size_t>(job.steps));
  const std::vector<JsonObject> metrics = ReadJsonLines(run_dir + "/metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  if (consecutive) {
    ASSERT_EQ(metrics.size(), static_cast<size_t>(job.steps));
  }
  int64_t expected_step = 1;
  for (const JsonObject& m : metrics) {
    const int64_t step = static_cast<int64_t>(m.GetNumber("step").value_or(0));
    ASSERT_GE(step, 1);
    ASSERT_LE(step, job.steps);
    if (consecutive) {
      EXPECT_EQ(step, expected_step++) << "a step was lost or repeated";
    }
    EXPECT_NEAR(m.GetNumber("loss").value_or(-1), ref.losses[step - 1], kElasticLossTolerance)
        << "step " << step;
  }
  EXPECT_EQ(metrics.back().GetNumber("step"), job.steps);
  EXPECT_EQ(ReadSampleTrace(trace), ref.samples) << "a sample was skipped or repeated";
}

}  // namespace mitra::testing
