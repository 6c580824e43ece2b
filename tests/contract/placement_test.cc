#include "mitra/contract/placement.h"

#include <gtest/gtest.h>

#include "contract/variables.h"

namespace mitra::contract {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Placement Planned() {
  Placement p;
  p.rank = 3;
  p.local_rank = 1;
  p.stage_map = StageMap::Default(2, 3);
  p.chunk_size = 4;
  p.global_batch = 48;
  p.max_steps = 100;
  p.resume_step = 40;
  p.rdzv_host = "10.0.0.1";
  p.rdzv_port = 29500;
  p.generation = 7;
  p.host = "10.0.0.2";
  p.threads = 2;
  p.timeout_s = 0.5;
  p.heartbeat_s = 0.25;
  p.run_dir = "/runs/a";
  p.checkpoint_dir = "/runs/a/checkpoints";
  p.checkpoint_every = 10;
  p.keep_checkpoints = 2;
  p.schedule = "1f1b";
  p.recompute = 1;
  p.zero = 1;
  p.partition = "3,5";
  p.shares = {5, 3, 4};
  p.step_trace = "/runs/a/rank-3.trace.json";
  p.job_token = std::string(64, 'c');
  return p;
}

TEST(Placement, WhatTheManagerWritesTheWorkerReadsBack) {
  const Placement sent = Planned();
  Result<Placement> read = Placement::FromEnvironment(sent.ToEnvironment());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_FALSE(read->standalone);
  EXPECT_EQ(read->rank, 3);
  EXPECT_EQ(read->local_rank, 1);
  EXPECT_EQ(read->stage_map.ToString(), "0,2,4;1,3,5;");
  EXPECT_EQ(read->stage(), 1);
  EXPECT_EQ(read->replica(), 1);
  EXPECT_EQ(read->chunk_size, 4);
  EXPECT_EQ(read->global_batch, 48);
  EXPECT_EQ(read->max_steps, 100);
  EXPECT_EQ(read->resume_step, 40);
  EXPECT_EQ(read->rdzv_host, "10.0.0.1");
  EXPECT_EQ(read->rdzv_port, 29500);
  EXPECT_EQ(read->shares, (std::vector<int64_t>{5, 3, 4}));
  EXPECT_EQ(read->generation, 7);
  EXPECT_EQ(read->host, "10.0.0.2");
  EXPECT_EQ(read->threads, 2);
  EXPECT_EQ(read->timeout_s, 0.5);
  EXPECT_EQ(read->heartbeat_s, 0.25);
  EXPECT_EQ(read->run_dir, "/runs/a");
  EXPECT_EQ(read->checkpoint_dir, "/runs/a/checkpoints");
  EXPECT_EQ(read->checkpoint_every, 10);
  EXPECT_EQ(read->keep_checkpoints, 2);
  EXPECT_EQ(read->schedule, "1f1b");
  EXPECT_EQ(read->recompute, 1);
  EXPECT_EQ(read->zero, 1);
  EXPECT_EQ(read->partition, "3,5");
  EXPECT_EQ(read->step_trace, "/runs/a/rank-3.trace.json");
  EXPECT_EQ(read->job_token, std::string(64, 'c'));
  EXPECT_EQ(read->ToEnvironment(), sent.ToEnvironment());
}

TEST(Placement, AProgramStartedByHandRunsAloneWithAFreePort) {
  Result<Placement> p = Placement::FromEnvironment(Environment{});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->standalone);
  EXPECT_EQ(p->world_size(), 1);
  EXPECT_GT(p->rdzv_port, 0);
  EXPECT_EQ(p->heartbeat_s, 1);
  // The program's own settings, which a manager that leaves them unset does not write.
  EXPECT_EQ(p->checkpoint_every, std::nullopt);
  EXPECT_EQ(p->keep_checkpoints, std::nullopt);
  EXPECT_EQ(p->max_steps, std::nullopt);
  EXPECT_EQ(p->recompute, std::nullopt);
  EXPECT_EQ(p->zero, std::nullopt);
  const Environment written = Placement{}.ToEnvironment();
  for (const char* unset : {kCheckpointEvery, kKeepCheckpoints, kMaxSteps, kChunkSize,
                            kGlobalBatch, kRecompute, kZero}) {
    EXPECT_EQ(written.count(unset), 0u) << unset;
  }
}

TEST(Placement, MalformedVariablesAreNamed) {
  Environment env = Planned().ToEnvironment();
  auto error = [&](const char* name, const char* value) {
    Environment bad = env;
    bad[name] = value;
    Result<Placement> p = Placement::FromEnvironment(bad);
    return p.ok() ? std::string("accepted") : p.status().message();
  };
  EXPECT_TRUE(Contains(error("MITRA_RANK", "-1"), "MITRA_RANK='-1' is not an integer >= 0"));
  EXPECT_TRUE(Contains(error("MITRA_RANK", "6"), "outside the stage-to-rank map"));
  EXPECT_TRUE(Contains(error("MITRA_THREADS", "0"), "MITRA_THREADS='0'"));
  EXPECT_TRUE(Contains(error("MITRA_TIMEOUT_S", "0"), "not a positive number of seconds"));
  EXPECT_TRUE(Contains(error("MITRA_HEARTBEAT_S", "soon"), "MITRA_HEARTBEAT_S='soon'"));
  EXPECT_TRUE(Contains(error("MITRA_RECOMPUTE", "yes"), "is not 0 or 1"));
  EXPECT_TRUE(Contains(error("MITRA_ZERO", "2"), "MITRA_ZERO='2' is not 0 or 1"));
  EXPECT_TRUE(Contains(error("MITRA_SHARES", "2,x"), "MITRA_SHARES='2,x' is not a list of whole"));
  EXPECT_TRUE(Contains(error("MITRA_SHARES", "0,4"), "MITRA_SHARES='0,4'"));
  EXPECT_TRUE(Contains(error("MITRA_STAGE_TO_RANK_MAP", "0,1;2"), "stage-to-rank map"));
  env.erase("MITRA_STAGE_TO_RANK_MAP");
  EXPECT_TRUE(Contains(error("MITRA_RANK", "0"), "start workers with `mitra run`"));
  env = Planned().ToEnvironment();
  env.erase("MITRA_RDZV_PORT");
  EXPECT_TRUE(Contains(error("MITRA_RANK", "0"), "MITRA_RDZV_PORT is not set"));
  env = Planned().ToEnvironment();
  env.erase("MITRA_JOB_TOKEN");
  EXPECT_TRUE(Contains(error("MITRA_RANK", "0"), "MITRA_JOB_TOKEN is not"));
}

TEST(Placement, PrecisionAndDeviceRoundTripAndBadValuesNameTheChoices) {
  Placement p = Planned();
  EXPECT_EQ(p.ToEnvironment().count("MITRA_PRECISION"), 0u);  // unset: the program's own
  EXPECT_EQ(p.ToEnvironment().count("MITRA_DEVICE"), 0u);
  p.precision = "bf16";
  p.device = "cuda";
  Result<Placement> back = Placement::FromEnvironment(p.ToEnvironment());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->precision, "bf16");
  EXPECT_EQ(back->device, "cuda");

  Environment env = Planned().ToEnvironment();
  env["MITRA_PRECISION"] = "fp8";
  Result<Placement> fp8 = Placement::FromEnvironment(env);
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().message(),
            "MITRA_PRECISION 'fp8' is not a precision: use fp32 (the default), bf16 or fp16");
  env = Planned().ToEnvironment();
  env["MITRA_DEVICE"] = "tpu";
  Result<Placement> tpu = Placement::FromEnvironment(env);
  ASSERT_FALSE(tpu.ok());
  EXPECT_EQ(tpu.status().message(),
            "MITRA_DEVICE 'tpu' is not a device: use cpu (the default) or cuda");
}

TEST(ProfileRequest, RoundTripsAndIsRefusedWhenIncomplete) {
  ProfileRequest sent;
  sent.machines = {"localhost", "10.0.0.2"};
  sent.slots = {2, 1};
  sent.micro_batches = {1, 4, 16};
  sent.repeats = 3;
  const Environment env = sent.ToEnvironment();
  EXPECT_EQ(env.at("MITRA_PROFILE"), "1");
  Result<ProfileRequest> read = ProfileRequest::FromEnvironment(env);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->machines, sent.machines);
  EXPECT_EQ(read->slots, sent.slots);
  EXPECT_EQ(read->micro_batches, sent.micro_batches);
  EXPECT_EQ(read->repeats, 3);

  Environment bad = env;
  bad["MITRA_PROFILE_SLOTS"] = "2";  // one machine's slots for two machines
  EXPECT_TRUE(Contains(ProfileRequest::FromEnvironment(bad).status().message(),
                       "set by `mitra profile`"));
  bad = env;
  bad["MITRA_PROFILE_MICRO_BATCHES"] = "1,x";
  EXPECT_TRUE(Contains(ProfileRequest::FromEnvironment(bad).status().message(),
                       "MITRA_PROFILE_MICRO_BATCHES='1,x'"));
}

TEST(StandbyStage, RoundTripsAndIgnoresWhatDoesNotParse) {
  for (const StandbyStage& sent : {StandbyStage{1, 2, ""}, StandbyStage{0, 4, "1,4,4,3"},
                                   StandbyStage{2, 3, "params"}}) {
    const std::optional<StandbyStage> read = StandbyStage::Parse(sent.ToString());
    ASSERT_TRUE(read) << sent.ToString();
    EXPECT_EQ(read->stage, sent.stage);
    EXPECT_EQ(read->stages, sent.stages);
    EXPECT_EQ(read->partition, sent.partition);
  }
  EXPECT_EQ((StandbyStage{0, 4, "1,4,4,3"}.ToString()), "0/4/1,4,4,3");
  for (const char* bad : {"", "1", "2/2", "-1/2", "1/x", "/2", "1/", "1/9999999", "a/2/5,5"}) {
    EXPECT_FALSE(StandbyStage::Parse(bad)) << bad;
  }
}

}  // namespace
}  // namespace mitra::contract
