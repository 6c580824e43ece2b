// The jobs of the elastic end-to-end tests (the GPT example unless said otherwise), and their
// uninterrupted references: whatever happens
// to a run (list edits, killed or hung workers, lost machines, a restarted manager), every step
// it trains must have the reference's loss, and the steps together the reference's samples.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/run_helpers.h"
#include "tests/worker/gpt_helpers.h"

namespace mitra::testing {

inline constexpr double kElasticLossTolerance = 2e-5;  // fp32 reordering, see fidelity_test.cc

struct ElasticJob {
  int64_t batch_size = 16;
  int64_t steps = 40;
  std::vector<std::string> program = GptArgs();  // the training program and its arguments
  int chunk_size = 4;                            // --chunk-size; 0: not given
  // How far a step's loss (and an evaluation) may be from the uninterrupted job's: fp32
  // reordering, which a change of shape brings, and how much the job amplifies it.
  double loss_tolerance = kElasticLossTolerance;
  // Files the program's behaviour depends on besides its binary (a Python program: its script
  // and mitra's extension), so that a rebuild runs the uninterrupted reference again.
  std::vector<std::string> depends_on = {};
};

// `mitra run` arguments for the job on `machines` with `stages` stages, plus `flags`.
inline std::vector<std::string> RunArgs(const ElasticJob& job, const std::string& machines,
                                        const std::string& run_dir, int stages,
                                        const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args{"run",          "--machines", machines,
                                "--batch-size", std::to_string(job.batch_size),
                                "--nstages",    std::to_string(stages),
                                "--max-steps",  std::to_string(job.steps),
                                "--run-dir",    run_dir};
  if (job.chunk_size > 0) args.insert(args.end(), {"--chunk-size", std::to_string(job.chunk_size)});
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.insert(args.end(), job.program.begin(), job.program.end());
  return args;
}

// Replaces `name` in `tmp` the way editors do: a new file renamed over the old one.
inline void RewriteFile(const TempDir& tmp, const std::string& name, const std::string& contents) {
  const std::string staged = tmp.Write(name + ".new", contents);
  ASSERT_EQ(std::rename(staged.c_str(), tmp.Path(name).c_str()), 0);
}

// Whether the job's first spare (--spares) parked within `timeout_s`: its log holds its `parked`
// record. A kill before that finds no spare to take the place (a Python spare imports torch
// first: 0.6-0.8 s), and the recovery starts a process instead.
inline bool SpareParked(const std::string& run_dir, double timeout_s) {
  for (double waited = 0; waited < timeout_s; waited += 0.05) {
    if (ReadFileOrEmpty(run_dir + "/logs/standby-0.log").find("\"event\":\"parked\"") !=
        std::string::npos) {
      return true;
    }
    ::usleep(50000);
  }
  return false;
}

// A test that runs one job under `mitra run`, its machine list, run directory and sample trace
// (MITRA_TRACE_SAMPLES) in a temporary folder of its own.
class ElasticRun : public ::testing::Test {
 protected:
  // Starts `mitra run` on `job` with `list` as the machine list and `stages` stages.
  std::unique_ptr<MitraProcess> StartJob(const ElasticJob& job, const std::string& list,
                                         int stages, const std::vector<std::string>& flags = {}) {
    machines_ = tmp_.Write("machines.txt", list);
    return MitraProcess::Start(MITRA_BINARY, RunArgs(job, machines_, run_dir_, stages, flags),
                               tmp_.path(), {{"MITRA_TRACE_SAMPLES", trace_}});
  }

  // Shrinks a job started on `localhost slots=4` to `slots=2` after its second step: mitra
  // run's result, checked to have ended well after a morph into 2 x 1.
  MitraResult ShrinkToTwoSlots(MitraProcess& mitra) {
    EXPECT_TRUE(mitra.WaitForStdout("step 2/", 120)) << mitra.Stdout() << mitra.Stderr();
    RewriteFile(tmp_, "machines.txt", "localhost slots=2\n");
    MitraResult r = mitra.Wait(180);
    EXPECT_EQ(r.exit_code, 0) << r.output();
    EXPECT_NE(r.out.find("mitra: morph done: training again in 2 x 1"), std::string::npos)
        << r.out;
    return r;
  }

  // Grows a 2-stage job started on `localhost slots=2` to `slots=4` after its second step: mitra
  // run's result, checked to have ended well after a grow into 2 x 2 that started its two new
  // workers first, each building its stage's segments and staging memory while it waited, and
  // kept everyone.
  MitraResult GrowToFourSlots(MitraProcess& mitra) {
    EXPECT_TRUE(mitra.WaitForStdout("step 2/", 120)) << mitra.Stdout() << mitra.Stderr();
    RewriteFile(tmp_, "machines.txt", "localhost slots=4\n");
    MitraResult r = mitra.Wait(180);
    EXPECT_EQ(r.exit_code, 0) << r.output();
    EXPECT_NE(r.out.find("starting 2 new workers first"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("mitra: morph done: training again in 2 x 2"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("4 workers kept, 0 started"), std::string::npos) << r.out;
    for (const std::string id : {"0", "1"}) {
      const std::string log = ReadFileOrEmpty(run_dir_ + "/logs/standby-" + id + ".log");
      EXPECT_NE(log.find("standby: built segments"), std::string::npos) << log;
      // and filled the checkpoint staging pool for its stage (worker/state/staging_pool.h)
      EXPECT_NE(log.find("MB of checkpoint staging while waiting"), std::string::npos) << log;
      EXPECT_EQ(log.find(" and 0.0 MB of checkpoint staging"), std::string::npos) << log;
    }
    return r;
  }

  TempDir tmp_;
  std::string machines_;
  const std::string run_dir_ = tmp_.Path("run");
  const std::string trace_ = tmp_.Path("trace");
};

struct Reference {
  std::vector<double> losses;  // by step - 1
  std::vector<JsonObject> evals;  // the evaluation records of metrics.jsonl
  std::map<int64_t, std::vector<int64_t>> samples;
};

// Removes the kept references of `job_name` that earlier builds wrote (its binaries' stamps
// differ from `kept`'s) more than a day ago: a build tree testing now may still read its own.
inline void ForgetOlderReferences(const std::string& job_name, const std::filesystem::path& kept) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto day_ago = fs::file_time_type::clock::now() - std::chrono::hours(24);
  std::vector<fs::path> older;
  for (fs::directory_iterator it(fs::temp_directory_path(), ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->path() == kept || name.rfind(job_name + "-", 0) != 0) continue;
    std::error_code time_ec;
    if (it->last_write_time(time_ec) < day_ago && !time_ec) older.push_back(it->path());
  }
  for (const fs::path& path : older) fs::remove_all(path, ec);
}

// The job trained once, 1 x 1 on localhost, without interruption. Every test of a job compares
// with the same run, so it is kept on disk for the test processes that follow (keyed by the job
// and by the gpt_train and mitra binaries it ran, so a rebuild runs it again).
inline const Reference& Uninterrupted(const ElasticJob& job) {
  static std::map<std::string, Reference> cache;
  std::string key = std::to_string(job.batch_size) + " " + std::to_string(job.steps) + " " +
                    std::to_string(job.chunk_size);
  for (const std::string& a : job.program) key += " " + a;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  namespace fs = std::filesystem;
  const std::string job_name = "mitra-elastic-reference-" + std::to_string(job.batch_size) + "-" +
                               std::to_string(job.steps) + "-" +
                               std::to_string(std::hash<std::string>()(key));
  std::string binaries;
  std::vector<std::string> stamped = job.depends_on;
  stamped.insert(stamped.end(), {job.program.front(), std::string(MITRA_BINARY)});
  for (const std::string& binary : stamped) {
    std::error_code ec;
    const auto time = fs::last_write_time(binary, ec).time_since_epoch().count();
    binaries += "-" + std::to_string(time) + "-" + std::to_string(fs::file_size(binary, ec));
  }
  const fs::path kept = fs::temp_directory_path() / (job_name + binaries);
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
      ForgetOlderReferences(job_name, kept);
    }
  }
  Reference& ref = cache[key];
  const std::vector<JsonObject> metrics = ReadJsonLines((kept / "run" / "metrics.jsonl").string());
  ref.losses = Losses(metrics);
  for (const JsonObject& m : metrics) {
    if (m.Has("eval_loss")) ref.evals.push_back(m);
  }
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
  const std::vector<JsonObject> all = ReadJsonLines(run_dir + "/metrics.jsonl");
  const std::vector<JsonObject> metrics = StepRecords(all);
  ASSERT_FALSE(metrics.empty());
  // Evaluations: the last one of each step (a step trained again is evaluated again).
  std::map<double, JsonObject> evals;
  for (const JsonObject& m : all) {
    if (m.Has("eval_loss")) evals[m.GetNumber("step").value_or(0)] = m;
  }
  ASSERT_EQ(evals.size(), ref.evals.size());
  for (const JsonObject& expected : ref.evals) {
    const JsonObject& got = evals[expected.GetNumber("step").value_or(0)];
    for (const auto& [key, value] : expected.fields()) {
      if (key.rfind("eval_", 0) != 0 || key == "eval_seconds") continue;
      EXPECT_NEAR(got.GetNumber(key).value_or(-1), value.number_value(), job.loss_tolerance)
          << key << " after step " << expected.GetNumber("step").value_or(0);
    }
  }
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
    EXPECT_NEAR(m.GetNumber("loss").value_or(-1), ref.losses[step - 1], job.loss_tolerance)
        << "step " << step;
  }
  EXPECT_EQ(metrics.back().GetNumber("step"), job.steps);
  EXPECT_EQ(ReadSampleTrace(trace), ref.samples) << "a sample was skipped or repeated";
}

// A job of two workers, one of which was killed with SIGKILL after step 5 and checkpoints
// every step, ended as it must (`r`: `mitra run`'s result): done, the kill named, recovered
// into 2 x 1 from a checkpoint of step 2 or later, the uninterrupted job's training, no worker
// left.
inline void ExpectRecoveredFromAKilledWorker(const ElasticJob& job, const MitraResult& r,
                                             const std::string& run_dir,
                                             const std::string& trace) {
  ASSERT_EQ(r.exit_code, 0) << r.output();
  EXPECT_NE(r.err.find("was killed by signal SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("mitra: recovery done: training again in 2 x 1"), std::string::npos)
      << r.out;
  const std::vector<JsonObject> launches = EventsNamed(run_dir, "launch");
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_GE(launches[1].GetNumber("resume_step").value_or(0), 2);
  ExpectSameTraining(job, run_dir, trace, /*consecutive=*/false);
  ExpectNoProcessLeft(run_dir);
}

}  // namespace mitra::testing
