// End to end: the real `mitra run` training the real GPT example (tiny) on local processes.
//
// Covers what a user sees: a P x D job trained to completion, a worker killed mid-run (the run
// stops with a report and leaves no process behind), and checkpoints that continue the job in
// another shape, schedule or partition with exactly the losses, samples and final parameters
// of the uninterrupted job.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "checkpoint/store.h"
#include "tests/common/run_helpers.h"
#include "tests/prerequisite.h"
#include "tests/worker/gpt_helpers.h"
#include "tests/worker/job_runner.h"

namespace mitra {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;
using testing::ExpectNoProcessLeft;
using testing::GptArgs;
using testing::Losses;
using testing::ReadSampleTrace;
using testing::MitraRun;
using testing::RunOutcome;

constexpr double kLossTolerance = 2e-5;   // fp32 reordering, see fidelity_test.cc
constexpr double kParamTolerance = 2e-6;

TEST(MitraRunGpt, TrainsAcrossTwoStagesAndTwoReplicasToCompletion) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome run = MitraRun(tmp, run_dir, 4, 2, 5, {}, GptArgs({"--schedule", "varuna"}));
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output();
  ASSERT_EQ(run.metrics.size(), 5u);
  for (size_t i = 0; i < run.metrics.size(); ++i) {
    const JsonObject& m = run.metrics[i];
    EXPECT_EQ(m.GetNumber("step"), static_cast<double>(i + 1));
    for (const char* field : {"loss", "samples", "tokens_per_s", "step_time_s", "stages",
                              "replicas", "generation", "time"}) {
      EXPECT_TRUE(m.Has(field)) << field;
    }
    EXPECT_EQ(m.GetNumber("stages"), 2);
    EXPECT_EQ(m.GetNumber("replicas"), 2);
  }
  EXPECT_LT(Losses(run.metrics).back(), Losses(run.metrics).front());
  EXPECT_NE(run.result.out.find("step 5/5"), std::string::npos) << run.result.out;
  ExpectNoProcessLeft(run_dir);
}

// What the kernel does with madvise(MADV_HUGEPAGE): "always", "madvise" or "never" (the word
// in brackets of /sys/kernel/mm/transparent_hugepage/enabled); "" where the file is missing.
std::string TransparentHugePages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t open = text.find('['), close = text.find(']');
  return open == std::string::npos || close < open ? "" : text.substr(open + 1, close - open - 1);
}

// The huge_page_bytes of rank 0's `memory` record in generation 0's log; -1 when it has none.
int64_t HugePageBytesOfRankZero(const std::string& run_dir) {
  for (const JsonObject& record :
       testing::WorkerRecords(testing::ReadFileOrEmpty(run_dir + "/logs/gen-0/rank-0.log"))) {
    if (record.GetString("event") == "memory") {
      return static_cast<int64_t>(record.GetNumber("huge_page_bytes").value_or(-1));
    }
  }
  return -1;
}

// The manager asks glibc for a heap on huge pages for every worker (run/worker_env.h), and the
// worker's `memory` record shows whether the kernel gave them; MITRA_MALLOC_TUNING=0 does not
// ask (the guard: the same check on a worker that did not ask finds none).
TEST(MitraRunGpt, WorkersHoldTheirHeapOnHugePagesUnlessTurnedOff) {
  const std::string mode = TransparentHugePages();
  if (mode != "madvise" && mode != "always") {
    GTEST_SKIP() << "the kernel gives no huge pages on request (transparent_hugepage: '" << mode
                 << "')";
  }
  TempDir tmp;
  const std::string asked = tmp.Path("asked"), not_asked = tmp.Path("not-asked");
  RunOutcome run = MitraRun(tmp, asked, 1, 1, 2, {}, GptArgs());
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output();
  EXPECT_GE(HugePageBytesOfRankZero(asked), int64_t{2} << 20);
  if (mode == "always") return;  // huge pages without asking: no guard to run
  RunOutcome plain = MitraRun(tmp, not_asked, 1, 1, 2, {"--env", "MITRA_MALLOC_TUNING=0"},
                              GptArgs());
  ASSERT_EQ(plain.result.exit_code, 0) << plain.result.output();
  EXPECT_EQ(HugePageBytesOfRankZero(not_asked), 0);
}

TEST(MitraRunGpt, AJobAlreadyAtMaxStepsStartsNothing) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome first = MitraRun(tmp, run_dir, 1, 1, 2, {}, GptArgs());
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output();
  RunOutcome again = MitraRun(tmp, run_dir, 1, 1, 2, {}, GptArgs());
  EXPECT_EQ(again.result.exit_code, 0) << again.result.output();
  EXPECT_NE(again.result.out.find("already at step 2 of --max-steps 2"), std::string::npos)
      << again.result.out;
  EXPECT_EQ(testing::EventsNamed(run_dir, "launch").size(), 1u);
}

// The profiler measures segments on the CPU: a job computing on GPUs is told to give its shape
// instead of being planned from another machine's figures (or profiling a large model for hours).
TEST(MitraRunGpt, APlannedJobOnAGpuIsRefusedWithTheFix) {
  TempDir tmp;
  const std::string machines = tmp.Write("machines.txt", "localhost slots=1\n");
  const auto r = testing::RunProgram(
      MITRA_BINARY,
      {"run", "--machines", machines, "--batch-size", "8", "--max-steps", "1", "--run-dir",
       tmp.Path("run"), "--", MITRA_GPT_TRAIN, "--model", "tiny", "--device", "cuda"},
      tmp.path(), 120);
  EXPECT_EQ(r.exit_code, 2) << r.output();  // bad input, as the profiling rank said
  EXPECT_NE(r.output().find("mitra profile measures segments on the CPU only"), std::string::npos)
      << r.output();
  EXPECT_NE(r.output().find("give mitra run --nstages P"), std::string::npos) << r.output();
}

TEST(MitraRunGpt, ResumingWithOtherSettingsIsNeverSilent) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome first = MitraRun(tmp, run_dir, 1, 1, 2, {}, GptArgs());
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output();
  // GptArgs gives --lr 1e-3; a later --lr wins.
  RunOutcome again = MitraRun(tmp, run_dir, 1, 1, 3, {}, GptArgs({"--lr", "2e-3"}));
  EXPECT_EQ(again.result.exit_code, 0) << again.result.output();
  EXPECT_NE(again.result.err.find("mitra: warning: rank 0: resuming from "), std::string::npos)
      << again.result.err;
  EXPECT_NE(again.result.err.find("lr_base 0.001 -> 0.002"), std::string::npos)
      << again.result.err;
  EXPECT_EQ(testing::EventsNamed(run_dir, "worker_warning").size(), 1u);
}

TEST(MitraRunGpt, KilledWorkerStopsTheRunWithAReportAndLeavesNoProcess) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  const std::string machines = tmp.Write("machines.txt", "localhost slots=2\n");
  auto mitra = testing::MitraProcess::Start(
      MITRA_BINARY,
      {"run", "--machines", machines, "--batch-size", "16", "--nstages", "2", "--max-steps",
       "100000", "--max-restarts", "0", "--run-dir", run_dir, "--", MITRA_GPT_TRAIN, "--model",
       "tiny"},
      tmp.path());
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 3/", 60)) << mitra->Stdout() << mitra->Stderr();
  const auto pids = testing::LaunchedPids(run_dir);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  const testing::MitraResult result = mitra->Wait(60);
  EXPECT_EQ(result.exit_code, 1) << result.output();
  EXPECT_NE(result.output().find("rank 1"), std::string::npos) << result.output();
  EXPECT_NE(result.output().find("SIGKILL"), std::string::npos) << result.output();
  ExpectNoProcessLeft(run_dir);
}

// The uninterrupted reference: 1 x 1, 6 steps, parameters dumped at the end, samples traced.
struct Reference {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  std::map<int64_t, std::vector<int64_t>> samples;
};

const Reference& Uninterrupted() {
  static const Reference reference = [] {
    TempDir tmp;
    Reference r;
    const std::string dump = tmp.Path("dump"), trace = tmp.Path("trace");
    RunOutcome run = MitraRun(tmp, tmp.Path("run"), 1, 1, 6, {}, GptArgs({"--dump-params", dump}),
                       {{"MITRA_TRACE_SAMPLES", trace}});
    EXPECT_EQ(run.result.exit_code, 0) << run.result.output();
    r.losses = Losses(run.metrics);
    r.params = testing::LoadTensorDict(dump + "/stage-0.pt");
    r.samples = ReadSampleTrace(trace);
    return r;
  }();
  return reference;
}

struct Morph {
  int slots_a, stages_a;
  std::vector<std::string> args_a;
  int slots_b, stages_b;
  std::vector<std::string> args_b;
};

void PrintTo(const Morph& m, std::ostream* os) {
  auto shape = [&](int slots, int stages, const std::vector<std::string>& args) {
    *os << stages << "x" << slots / stages;
    for (const auto& a : args) *os << " " << a;
  };
  shape(m.slots_a, m.stages_a, m.args_a);
  *os << " -> ";
  shape(m.slots_b, m.stages_b, m.args_b);
}

std::string MorphName(const ::testing::TestParamInfo<Morph>& info) {
  std::ostringstream os;
  PrintTo(info.param, &os);
  std::string name;
  for (char c : os.str()) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

// Without --chunk-size each shape takes its own micro-batch for a micro-batch independent model
// (the GPT): a resume in another shape says so, next to the shape.
TEST(MicroBatchAtAResume, AChangedSizeIsSaidForAMicroBatchIndependentModel) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  auto run = [&](int slots, int stages, int steps) {
    const std::string machines =
        tmp.Write("machines.txt", "localhost slots=" + std::to_string(slots) + "\n");
    std::vector<std::string> args{"run", "--machines", machines, "--batch-size", "16",
                                  "--nstages", std::to_string(stages), "--max-steps",
                                  std::to_string(steps), "--run-dir", run_dir, "--"};
    for (const std::string& a : GptArgs()) args.push_back(a);
    return testing::RunProgram(MITRA_BINARY, args, tmp.path(), 180);
  };
  const testing::MitraResult a = run(1, 1, 2);
  ASSERT_EQ(a.exit_code, 0) << a.output();
  EXPECT_NE(a.out.find("micro-batches of 16\n"), std::string::npos) << a.out;
  const testing::MitraResult b = run(4, 2, 3);
  ASSERT_EQ(b.exit_code, 0) << b.output();
  EXPECT_NE(b.out.find("micro-batches of 1 (the checkpoint's were of 16; the model is "
                       "micro-batch independent: only the rounding changes)"),
            std::string::npos)
      << b.out;
}

class Continuation : public ::testing::TestWithParam<Morph> {};

TEST_P(Continuation, ResumedJobEqualsTheUninterruptedOne) {
  const Morph& m = GetParam();
  const Reference& reference = Uninterrupted();
  ASSERT_EQ(reference.losses.size(), 6u);
  TempDir tmp;
  const std::string run_dir = tmp.Path("run"), dump = tmp.Path("dump"), trace = tmp.Path("trace");
  const std::map<std::string, std::string> env{{"MITRA_TRACE_SAMPLES", trace}};
  // Shape A: 4 steps, a checkpoint after step 2 and the final one after step 4.
  RunOutcome a = MitraRun(tmp, run_dir, m.slots_a, m.stages_a, 4, {"--checkpoint-every", "2"},
                   GptArgs(m.args_a), env);
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output();
  // Shape B continues the same run directory from step 4 to step 6.
  auto args_b = m.args_b;
  args_b.insert(args_b.end(), {"--dump-params", dump});
  RunOutcome b = MitraRun(tmp, run_dir, m.slots_b, m.stages_b, 6, {}, GptArgs(args_b), env);
  ASSERT_EQ(b.result.exit_code, 0) << b.result.output();
  EXPECT_NE(b.result.out.find("resuming from " + run_dir + "/checkpoints/step-4"),
            std::string::npos)
      << b.result.out;

  const std::vector<double> losses = Losses(b.metrics);  // metrics.jsonl holds both runs
  ASSERT_EQ(losses.size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(losses[k], reference.losses[k], kLossTolerance) << "step " << k + 1;
    EXPECT_EQ(b.metrics[k].GetNumber("step"), static_cast<double>(k + 1));
  }
  EXPECT_EQ(ReadSampleTrace(trace), reference.samples) << "a sample was skipped or repeated";
  std::map<std::string, torch::Tensor> got;
  for (int s = 0; s < m.stages_b; ++s) {
    for (auto& [name, t] : testing::LoadTensorDict(dump + "/stage-" + std::to_string(s) + ".pt")) {
      got[name] = t;
    }
  }
  ASSERT_EQ(got.size(), reference.params.size());
  for (const auto& [name, expected] : reference.params) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_LE((got[name] - expected).abs().max().item<double>(), kParamTolerance) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Continuation,
    ::testing::Values(
        // 2x2 -> 1x3: a global batch (16) that 3 replicas do not divide.
        Morph{4, 2, {}, 3, 1, {}},
        // 1x4 -> 4x1.
        Morph{4, 1, {}, 4, 4, {}},
        // 2x1 -> 2x2.
        Morph{2, 2, {}, 4, 2, {}},
        // A change of schedule, and of partition.
        Morph{2, 2, {"--schedule", "gpipe"}, 2, 2, {"--schedule", "varuna"}},
        Morph{2, 2, {"--schedule", "1f1b"}, 4, 2, {"--schedule", "zb-h1"}},
        Morph{4, 2, {"--schedule", "zb-h1"}, 4, 4, {"--schedule", "1f1b"}},
        Morph{2, 2, {"--partition", "1,3"}, 2, 2, {"--partition", "3,1"}},
        // Two chunks per rank: a checkpoint whose partition cuts P·2 ranges, into another
        // schedule with two chunks and into one with one.
        Morph{2, 2, {"--schedule", "interleaved"}, 4, 2, {"--schedule", "zb-v"}},
        Morph{4, 2, {"--schedule", "zb-v"}, 3, 1, {}},
        // ZeRO-1's checkpoint (each replica wrote its share's optimizer state) into a job
        // without it, in another shape, and the other way round.
        Morph{4, 2, {"--zero", "1"}, 3, 1, {}},
        Morph{2, 1, {}, 4, 2, {"--zero", "1"}}),
    MorphName);

TEST(MitraRunGpt, DamagedNewestCheckpointFallsBackToThePreviousOneNamingTheFile) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome a = MitraRun(tmp, run_dir, 2, 2, 4, {"--checkpoint-every", "2"}, GptArgs());
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output();
  const std::string victim = run_dir + "/checkpoints/step-4/seg-block1.pt";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  RunOutcome b = MitraRun(tmp, run_dir, 2, 2, 5, {}, GptArgs());
  ASSERT_EQ(b.result.exit_code, 0) << b.result.output();
  EXPECT_NE(b.result.err.find(victim + " does not match its checksum"), std::string::npos)
      << b.result.err;
  EXPECT_NE(b.result.out.find("resuming from " + run_dir + "/checkpoints/step-2"),
            std::string::npos)
      << b.result.out;
  // Steps 3 and 4 were trained again from step 2: metrics.jsonl shows 1 2 3 4 3 4 5.
  ASSERT_EQ(b.metrics.size(), 7u);
  EXPECT_NEAR(Losses(b.metrics)[4], Losses(b.metrics)[2], kLossTolerance);

  // `mitra checkpoint` sees the same: the damaged step 4 was replaced by the new run's
  // checkpoints, so damage it again in the newest one.
  const std::string newest = run_dir + "/checkpoints/step-5/seg-embed.pt";
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x01');
  }
  auto verify = testing::RunProgram(MITRA_BINARY, {"checkpoint", "verify", run_dir + "/checkpoints"},
                                    tmp.path());
  EXPECT_EQ(verify.exit_code, 1) << verify.output();
  EXPECT_NE(verify.out.find("step 5  DAMAGED: " + newest), std::string::npos) << verify.out;
  auto list = testing::RunProgram(MITRA_BINARY, {"checkpoint", "list", run_dir + "/checkpoints"},
                                  tmp.path());
  EXPECT_EQ(list.exit_code, 0) << list.output();
  EXPECT_NE(list.out.find("written by 2 x 1"), std::string::npos) << list.out;
}

// Every step of a save cut short, one at a time, is checkpoint/store_test.cc's
// ASaveCutShortAtAnyStepLeavesTheOldOrTheNewCheckpointComplete. Here the real thing: workers
// saving at every step are killed the way a machine dies (no handler runs), at whatever point
// they are; what follows must hold whatever that point was.
TEST(MitraRunGpt, WorkersKilledWhileCheckpointingEveryStepNeverLeaveAHalfCheckpointListed) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run"), checkpoints = run_dir + "/checkpoints";
  const std::string machines = tmp.Write("machines.txt", "localhost slots=2\n");
  auto mitra = testing::MitraProcess::Start(
      MITRA_BINARY,
      {"run", "--machines", machines, "--batch-size", "16", "--nstages", "2", "--max-steps",
       "100000", "--checkpoint-every", "1", "--keep-checkpoints", "1000", "--max-restarts", "0",
       "--run-dir", run_dir,
       "--", MITRA_GPT_TRAIN, "--model", "tiny"},
      tmp.path());
  ASSERT_TRUE(mitra);
  ASSERT_TRUE(mitra->WaitForStdout("step 3/", 60)) << mitra->Stdout() << mitra->Stderr();
  for (pid_t pid : testing::LaunchedPids(run_dir)) ::kill(pid, SIGKILL);
  EXPECT_EQ(mitra->Wait(60).exit_code, 1);
  ExpectNoProcessLeft(run_dir);

  // Everything listed as complete verifies; what was being written is not listed.
  const auto steps = checkpoint::ListSteps(checkpoints);
  ASSERT_FALSE(steps.empty());
  for (int64_t step : steps) {
    EXPECT_TRUE(checkpoint::Verify(checkpoint::StepDirectory(checkpoints, step)).ok()) << step;
  }
  // And the job continues from the newest complete one.
  RunOutcome again = MitraRun(tmp, run_dir, 2, 2, steps.front() + 1, {}, GptArgs());
  EXPECT_EQ(again.result.exit_code, 0) << again.result.output();
  EXPECT_NE(again.result.out.find("resuming from " +
                                  checkpoint::StepDirectory(checkpoints, steps.front())),
            std::string::npos)
      << again.result.out;
}

TEST(MitraRunGpt, FullDiskFailsTheSaveCleanlyAndKeepsEarlierCheckpoints) {
  TempDir tmp;
  const std::string disk = tmp.Path("disk");
  fs::create_directories(disk);
  // A 1.2 MB file system: two checkpoints of the tiny model (0.55 MB each) fit, a third not.
  // Its root is this user's alone (a tmpfs is 1777 by default, which mitra refuses).
  auto mounted = testing::RunProgram(
      "/bin/mount", {"-t", "tmpfs", "-o", "size=1200k,mode=0700", "tmpfs", disk}, tmp.path());
  MITRA_SKIP_WITHOUT(mounted.exit_code != 0 ? "cannot mount a tmpfs here: " + mounted.output()
                                             : "");
  struct Unmount {
    std::string path;
    ~Unmount() { testing::RunProgram("/bin/umount", {path}, "/", 30); }
  } unmount{disk};

  RunOutcome run = MitraRun(tmp, tmp.Path("run"), 1, 1, 4,
                            {"--checkpoint-every", "1", "--keep-checkpoints", "10",
                             "--checkpoint-dir", disk, "--max-restarts", "0"},
                            GptArgs());
  // Training went on through the failed save; the final save failed too, so the job says so.
  EXPECT_EQ(run.result.exit_code, 1) << run.result.output();
  EXPECT_EQ(run.metrics.size(), 4u);
  const std::string log = testing::ReadFileOrEmpty(tmp.Path("run") + "/logs/gen-0/rank-0.log");
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_NE(log.find("earlier checkpoints are intact"), std::string::npos) << log;
  EXPECT_EQ(checkpoint::ListSteps(disk), (std::vector<int64_t>{2, 1}));
  for (int64_t step : {1, 2}) {
    EXPECT_TRUE(checkpoint::Verify(checkpoint::StepDirectory(disk, step)).ok()) << step;
  }
}

TEST(MitraRunGpt, CheckpointFilesLoadInPythonWithTorchLoad) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome a = MitraRun(tmp, run_dir, 1, 1, 2, {}, GptArgs());
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output();
  const std::string dir = run_dir + "/checkpoints/step-2";
  const std::string script =
      "import torch,sys\n"
      "d = torch.load(sys.argv[1] + '/seg-embed.pt', weights_only=True)\n"
      "t = torch.load(sys.argv[1] + '/trainer.pt', weights_only=True)\n"
      "assert tuple(d['param/wte.weight'].shape) == (256, 32), d.keys()\n"
      "assert int(d['step/wte.weight']) == 2 and int(t['step']) == 2\n"
      "print('ok', sorted(d)[:2])\n";
  const std::string path = tmp.Write("load.py", script);
  auto result = testing::RunProgram("/usr/bin/python3", {path, dir}, tmp.path(), 60);
  EXPECT_EQ(result.exit_code, 0) << result.output();
  EXPECT_NE(result.out.find("ok"), std::string::npos) << result.output();

  // The export: one file holding every segment file's tensors under clear keys, equal values.
  const std::string exported = tmp.Path("model.pt");
  auto exporting = testing::RunProgram(
      MITRA_BINARY, {"checkpoint", "export", run_dir + "/checkpoints", exported}, tmp.path());
  ASSERT_EQ(exporting.exit_code, 0) << exporting.output();
  EXPECT_NE(exporting.out.find("exported step 2 of " + dir), std::string::npos) << exporting.out;
  const std::string compare = tmp.Write(
      "compare.py",
      "import torch, sys, os\n"
      "e = torch.load(sys.argv[2], weights_only=True)\n"
      "assert set(e) == {'model', 'optimizer', 'trainer'}, e.keys()\n"
      "n = 0\n"
      "for f in sorted(os.listdir(sys.argv[1])):\n"
      "    if not f.startswith('seg-'): continue\n"
      "    seg = f[4:-3]\n"
      "    for key, t in torch.load(os.path.join(sys.argv[1], f), weights_only=True).items():\n"
      "        kind, name = key.split('/', 1)\n"
      "        full = seg + '.' + name\n"
      "        got = e['model'][full] if kind == 'param' else e['optimizer'][kind][full]\n"
      "        assert got.dtype == t.dtype and torch.equal(got, t), key\n"
      "        n += 1\n"
      "t = torch.load(os.path.join(sys.argv[1], 'trainer.pt'), weights_only=True)\n"
      "assert set(t) == set(e['trainer']) and int(e['trainer']['step']) == 2\n"
      "assert torch.equal(t['rng_state'], e['trainer']['rng_state'])\n"
      "assert e['model']['embed.wte.weight'].shape == (256, 32)\n"
      "print('equal', n, len(e['model']))\n");
  auto compared = testing::RunProgram("/usr/bin/python3", {compare, dir, exported}, tmp.path(), 60);
  EXPECT_EQ(compared.exit_code, 0) << compared.output();
  EXPECT_NE(compared.out.find("equal"), std::string::npos) << compared.output();

  // A damaged checkpoint is refused, naming the file, and nothing is written.
  {
    std::fstream f(dir + "/seg-head.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x42');
  }
  const std::string refused_out = tmp.Path("refused.pt");
  auto refused = testing::RunProgram(MITRA_BINARY, {"checkpoint", "export", dir, refused_out},
                                     tmp.path());
  EXPECT_EQ(refused.exit_code, 2) << refused.output();
  EXPECT_NE(refused.err.find(dir + "/seg-head.pt does not match its checksum"), std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(refused_out));
  auto help = testing::RunProgram(MITRA_BINARY, {"checkpoint", "--help"}, tmp.path());
  EXPECT_EQ(help.exit_code, 0) << help.output();
  EXPECT_NE(help.out.find("mitra checkpoint export DIR OUT.pt"), std::string::npos) << help.out;
}

// The bench and large GPTs have the same segments but another width: a checkpoint of one is
// refused for the other by `mitra run` itself, before any worker is started or anything is
// written, naming the first parameter that differs.
TEST(MitraRunGpt, AnotherModelsCheckpointIsRefusedBeforeAnythingStarts) {
  TempDir tmp;
  const std::string run_dir = tmp.Path("run");
  RunOutcome a = MitraRun(tmp, run_dir, 1, 1, 1, {},
                          {MITRA_GPT_TRAIN, "--model", "bench", "--seed", "3"});
  ASSERT_EQ(a.result.exit_code, 0) << a.result.output();
  const std::string metrics_before = testing::ReadFileOrEmpty(run_dir + "/metrics.jsonl");

  RunOutcome b = MitraRun(tmp, run_dir, 1, 1, 2, {},
                          {MITRA_GPT_TRAIN, "--model", "large", "--seed", "3"});
  EXPECT_EQ(b.result.exit_code, 2) << b.result.output();
  EXPECT_NE(b.result.err.find("checkpoint " + run_dir + "/checkpoints/step-1 was written by "
                              "another model: parameter 'embed.wte.weight' is [256,128] in it "
                              "but [256,1024] in the program; pass another --checkpoint-dir"),
            std::string::npos)
      << b.result.err;
  EXPECT_FALSE(fs::exists(run_dir + "/logs/gen-1")) << "a worker was started";
  EXPECT_EQ(testing::ReadFileOrEmpty(run_dir + "/metrics.jsonl"), metrics_before);
  EXPECT_EQ(checkpoint::ListSteps(run_dir + "/checkpoints"), std::vector<int64_t>{1});
  EXPECT_TRUE(checkpoint::Verify(run_dir + "/checkpoints/step-1").ok());
}

}  // namespace
}  // namespace mitra
