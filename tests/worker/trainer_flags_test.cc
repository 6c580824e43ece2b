// The example programs' command line (examples/common/trainer_flags.h), run as the real
// binaries: a bad flag or value ends them with exit code 2 and one line that says what the flag
// takes, before anything trains; --help lists every flag with the program's own defaults.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/common/run_helpers.h"

namespace mitra {
namespace {

testing::MitraResult RunFlags(const std::string& program, const std::vector<std::string>& args) {
  testing::TempDir dir;
  return testing::RunProgram(program, args, dir.path(), 60);
}

TEST(TrainerFlags, AnUnknownScheduleExitsTwoNamingTheSchedules) {
  const auto r = RunFlags(MITRA_GPT_TRAIN, {"--model", "tiny", "--schedule", "zb-x"});
  EXPECT_EQ(r.exit_code, 2) << r.output();
  EXPECT_EQ(r.err,
            "gpt_train: --schedule: unknown schedule 'zb-x' (expected gpipe, 1f1b, varuna, zb-h1, "
            "interleaved or zb-v)\n");
  EXPECT_EQ(r.out, "");
}

// mitra run describes the program before it starts the job: the same refusal ends it there.
TEST(TrainerFlags, MitraRunRefusesABadFlagBeforeStartingAnything) {
  testing::TempDir dir;
  const std::string machines = dir.Write("machines.txt", "localhost slots=2\n");
  const auto r = testing::RunProgram(
      MITRA_BINARY,
      {"run", "--machines", machines, "--batch-size", "8", "--run-dir", dir.Path("run"), "--",
       MITRA_GPT_TRAIN, "--model", "tiny", "--schedule", "zb-x"},
      dir.path(), 60);
  EXPECT_EQ(r.exit_code, 2) << r.output();
  EXPECT_NE(r.output().find("gpt_train: --schedule: unknown schedule 'zb-x' (expected gpipe, "
                            "1f1b, varuna, zb-h1, interleaved or zb-v)"),
            std::string::npos)
      << r.output();
  EXPECT_FALSE(std::filesystem::exists(dir.Path("run"))) << "a run directory was created";
}

TEST(TrainerFlags, BadValuesAndUnknownFlagsExitTwoWithOneLineSayingWhatToGive) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--batch-size", "0"}, "gpt_train: --batch-size: '0' is not a whole number >= 1"},
      {{"--lr", "fast"}, "gpt_train: --lr: 'fast' is not a number"},
      {{"--partition", "1,x"}, "gpt_train: --partition: partition '1,x': 'x' is not a segment"},
      {{"--sampler", "random"}, "gpt_train: --sampler: unknown sampler 'random' (expected"},
      {{"--device", "tpu"}, "gpt_train: --device: unknown device 'tpu' (expected cpu or cuda)"},
      {{"--precision=fp8"}, "gpt_train: --precision: unknown precision 'fp8'"},
      {{"--optimizer", "lion"}, "unknown optimizer 'lion' (expected sgd, adam, adamw)"},
      {{"--batch", "8"}, "gpt_train: unknown flag '--batch'; did you mean --batch-size?"},
      {{"--steps", "3", "extra"}, "gpt_train: unexpected argument 'extra'"},
      {{"--chunk-size"}, "see `gpt_train --help`"},
  };
  for (const Case& c : cases) {
    const auto r = RunFlags(MITRA_GPT_TRAIN, c.args);
    EXPECT_EQ(r.exit_code, 2) << c.says << "\n" << r.output();
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// A schedule with several chunks per stage needs a range of segments for each: what does not
// give one is refused when the runtime is made, with exit code 2 and what to give instead.
TEST(TrainerFlags, ChunksWithoutARangeEachAreRefusedNamingTheFix) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--schedule", "interleaved", "--partition", "4"},  // v = 1 on the one stage
       "schedule interleaved runs v >= 2 chunks on each of the 1 stages, one count of --partition "
       "each, and the partition gives 1: give a multiple of 1 counts, 2 or more"},
      {{"--schedule", "zb-v", "--partition", "1,1,2"},
       "schedule zb-v runs 2 chunks on each of the 1 stages, and the partition gives 3 counts: "
       "give 2, one per chunk"},
      {{"--schedule", "interleaved", "--partition", "1,1,1,1,1"},
       "schedule interleaved runs 5 chunks on each of the 1 stages, 5 ranges of segments, and "
       "the model has 4 segments: use fewer stages or chunks, or another schedule"},
      {{"--schedule", "interleaved", "--partition", "1,2,1"}, ""},  // v = 3 on the one stage
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"--model", "tiny", "--steps", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto r = RunFlags(MITRA_GPT_TRAIN, args);
    if (c.says.empty()) {
      EXPECT_EQ(r.exit_code, 0) << r.output();
      continue;
    }
    EXPECT_EQ(r.exit_code, 2) << r.output();
    EXPECT_NE(r.output().find(c.says), std::string::npos) << r.output();
  }
}

// A switch takes a value too: --async-checkpoints=false turns off what is on by default.
TEST(TrainerFlags, ParsedSettingsReachTheRuntime) {
  const auto r =
      RunFlags(MITRA_GPT_TRAIN, {"--model", "tiny", "--steps", "1", "--batch-size", "4",
                                 "--chunk-size", "2", "--schedule=gpipe", "--sampler", "sequential",
                                 "--partition", "uniform", "--schedule", "varuna",
                                 "--async-checkpoints=false", "--betas", "0.8,0.9"});
  ASSERT_EQ(r.exit_code, 0) << r.output();
  // The last of a flag given twice wins; the settings record spells the names back.
  EXPECT_NE(r.out.find("\"schedule\":\"varuna\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sampler sequential"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("betas 0.8, 0.9"), std::string::npos) << r.out;
}

TEST(TrainerFlags, HelpListsEveryFlagWithTheProgramsOwnDefaults) {
  const auto gpt = RunFlags(MITRA_GPT_TRAIN, {"--help"});
  ASSERT_EQ(gpt.exit_code, 0) << gpt.output();
  for (const std::string flag : {"--model NAME=bench",
                                 "--seed N=1234",
                                 "--steps N=100",
                                 "--batch-size N=32",
                                 "--chunk-size N=8",
                                 "--schedule NAME=1f1b",
                                 "--recompute",
                                 "--partition NAME=uniform",
                                 "--optimizer NAME=adamw",
                                 "--lr X=0.0003",
                                 "--warmup N=0",
                                 "--cosine-steps N=0",
                                 "--weight-decay X=0.01",
                                 "--momentum X=0",
                                 "--nesterov",
                                 "--dropout X=0",
                                 "--sampler NAME=shuffled",
                                 "--clip X=1",
                                 "--backend NAME=gloo",
                                 "--precision NAME=fp32",
                                 "--device NAME=cpu",
                                 "--loss-scale X ",
                                 "--betas X,Y=0.9,0.999",
                                 "--async-checkpoints=true",
                                 "--checkpoint-every N=0",
                                 "--dump-params PATH",
                                 "--trace PATH"}) {
    EXPECT_NE(gpt.out.find(flag), std::string::npos) << flag << "\n" << gpt.out;
  }
  const auto fashion = RunFlags(MITRA_FASHION_TRAIN, {"-h"});
  ASSERT_EQ(fashion.exit_code, 0) << fashion.output();
  for (const std::string flag : {"--batch-size N=64", "--chunk-size N=16", "--optimizer NAME=sgd",
                                 "--lr X=0.05", "--momentum X=0.9", "--steps N=1000",
                                 "--eval-every N=250", "--test-after", "sgd | adam | adamw | lion"}) {
    EXPECT_NE(fashion.out.find(flag), std::string::npos) << flag << "\n" << fashion.out;
  }
}

}  // namespace
}  // namespace mitra
