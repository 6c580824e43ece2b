// Checkpointer: its real save, every change to the disk made through a FaultyFileSystem
// (tests/common/faulty_file_system.h), failed or cut short by a crash at each of its steps in
// turn: the tensor files' creation, every append and their fsync, the manifest, the syncs, the
// rename and the pruning. Whatever the step, the newest checkpoint a restart finds is complete
// and loads bit for bit as it was saved: the previous one until the rename, the new one from
// then on; and the next save succeeds. A 1 x 1 runtime of the tiny model (AdamW, so optimizer
// state is saved too), in this process (tests/worker/thread_ranks.h).
#include "worker/state/checkpointer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "checkpoint/store.h"
#include "common/free_port.h"
#include "tests/common/faulty_file_system.h"
#include "tests/common/run_helpers.h"
#include "tests/worker/thread_ranks.h"
#include "tests/worker/tiny_model.h"
#include "worker/state/staging_pool.h"

namespace mitra::worker {
namespace {
using mitra::testing::FaultyFileSystem;

// What a checkpoint must give back: the parameters, the optimizer's state and the generator.
using State = std::map<std::string, torch::Tensor>;

State Capture(Runtime& runtime) {
  State state;
  for (const NamedTensor& p : runtime.stage().parameters()) {
    state["param/" + p.name] = p.tensor.detach().clone();
    for (const auto& [name, t] : runtime.optimizer().State(p.tensor)) {
      state[name + "/" + p.name] = t.detach().clone();
    }
  }
  state["rng"] = at::detail::getDefaultCPUGenerator().get_state();
  return state;
}

// Empty when `got` equals `expected` bit for bit; else what differs.
std::string Difference(const State& got, const State& expected) {
  if (got.size() != expected.size()) {
    return std::to_string(got.size()) + " tensors, expected " + std::to_string(expected.size());
  }
  for (const auto& [name, t] : expected) {
    auto it = got.find(name);
    if (it == got.end()) return name + " is missing";
    if (!torch::equal(it->second, t)) return name + " differs";
  }
  return "";
}

class CheckpointerCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    auto port = PickFreeTcpPort("127.0.0.1");
    ASSERT_TRUE(port.ok()) << port.status().message();
    RuntimeOptions options;
    options.global_batch = 4;
    options.chunk_size = 2;
    auto runtime = Runtime::Create(spec_, std::make_shared<mitra::testing::TinyDataset>(64),
                                   mitra::testing::LoopbackPlacement(1, 1, 0, *port), options);
    ASSERT_TRUE(runtime.ok()) << runtime.status().message();
    runtime_ = std::move(*runtime);
    dir_ = tmp_.Path("checkpoints");
    checkpoint_options_.dir = dir_;
    checkpoint_options_.keep = 1;
  }

  // Trains one step and saves it as `step` with `checkpointer`; the state saved.
  State TrainAndSave(Checkpointer& checkpointer, int64_t step, Status* saved) {
    runtime_->Step(step);
    const State state = Capture(*runtime_);
    checkpointer.Save(step);
    *saved = checkpointer.Wait();
    return state;
  }

  // The newest complete checkpoint, restored into the runtime: its step, or -1 (and a test
  // failure) when there is none or it does not load.
  int64_t RestoreNewest() {
    std::vector<std::string> skipped;
    auto found = checkpoint::FindNewestValid(disk_, dir_, &skipped);
    EXPECT_TRUE(skipped.empty()) << skipped.front();
    if (!found.ok()) {
      ADD_FAILURE() << found.status().message();
      return -1;
    }
    Checkpointer reader(*runtime_, spec_, checkpoint_options_);
    const Status restored = reader.Restore(found->step);
    EXPECT_TRUE(restored.ok()) << restored.message();
    return restored.ok() ? found->step : -1;
  }

  const cutpoint::ModelSpec spec_ = mitra::testing::TinyMlp(2);
  std::unique_ptr<Runtime> runtime_;
  mitra::testing::TempDir tmp_;
  std::string dir_;
  CheckpointOptions checkpoint_options_;  // asynchronous, as by default
  PosixFileSystem disk_;
};

TEST_F(CheckpointerCrash, ASaveCutShortAtAnyStepLeavesTheLastCompleteCheckpointLoadable) {
  // A save without a fault: how many changes it makes, and which one is the commit's rename.
  // Every later save finds the directory as this one leaves it: one complete checkpoint.
  Status saved;
  FaultyFileSystem counting(disk_);
  int64_t previous_step = 1;
  State previous;
  {
    Checkpointer checkpointer(*runtime_, spec_, checkpoint_options_, counting);
    previous = TrainAndSave(checkpointer, previous_step, &saved);
    ASSERT_TRUE(saved.ok()) << saved.message();
  }
  const std::vector<std::string> log = counting.log();
  int rename = -1;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].rfind("rename ", 0) == 0) rename = static_cast<int>(i);
  }
  ASSERT_GE(rename, 0) << "no rename among the save's changes";
  // Three tensor files, each created, appended to and fsynced; then the manifest, the syncs
  // and the rename (the first save has nothing to prune).
  ASSERT_GE(counting.changes(), 3 * 3 + 4);

  int64_t step = previous_step;  // every save its own step: the ranks' reports are keyed by it
  for (FaultyFileSystem::Fault fault :
       {FaultyFileSystem::Fault::kFail, FaultyFileSystem::Fault::kCrash}) {
    const bool crash = fault == FaultyFileSystem::Fault::kCrash;
    // One more change than the first save: the previous checkpoint's removal.
    for (int at = 0; at <= counting.changes(); ++at) {
      SCOPED_TRACE(std::string(crash ? "a crash at " : "a failure of ") + "change " +
                   std::to_string(at) + (at < counting.changes() ? ": " + log[at] : ": prune"));
      const int64_t faulty_step = ++step;
      FaultyFileSystem faulty(disk_, at, fault);
      Checkpointer checkpointer(*runtime_, spec_, checkpoint_options_, faulty);
      const State attempted = TrainAndSave(checkpointer, faulty_step, &saved);
      ASSERT_TRUE(faulty.faulted()) << "the save made fewer changes than the first one";
      EXPECT_FALSE(saved.ok()) << "the injected fault went unreported";

      // Never a partial directory taken for complete: the new step is listed only from the
      // rename on, and what is listed verifies. The newest loads bit for bit as it was saved.
      const std::vector<int64_t> listed = checkpoint::ListSteps(disk_, dir_);
      EXPECT_EQ(std::count(listed.begin(), listed.end(), faulty_step), at > rename ? 1 : 0);
      for (int64_t s : listed) {
        EXPECT_TRUE(checkpoint::Verify(disk_, checkpoint::StepDirectory(dir_, s)).ok()) << s;
      }
      const bool committed = at > rename;
      EXPECT_EQ(RestoreNewest(), committed ? faulty_step : previous_step);
      EXPECT_EQ(Difference(Capture(*runtime_), committed ? attempted : previous), "");

      // The job goes on from what it restored and saves again: through the same file system
      // after a failure, as a restarted process after a crash. That save leaves one complete
      // checkpoint, the previous one of the next round.
      previous_step = ++step;
      Checkpointer restarted(*runtime_, spec_, checkpoint_options_);
      previous = TrainAndSave(crash ? restarted : checkpointer, previous_step, &saved);
      EXPECT_TRUE(saved.ok()) << saved.message();
      EXPECT_EQ(checkpoint::ListSteps(disk_, dir_), std::vector<int64_t>{previous_step});
      if (::testing::Test::HasFailure()) return;  // one round's failures say it all
    }
  }
}

// The staging memory of the saves: a checkpointer lives for one generation of the job, and the
// first save of the next (right after a morph) copies into the memory the last one's used.
class CheckpointerStaging : public CheckpointerCrash {
 protected:
  // The bytes a save of the runtime's state copies: its parameters and optimizer state (not
  // scalars, which it copies at once).
  int64_t StagedBytes() {
    int64_t bytes = 0;
    for (const auto& [name, t] : Capture(*runtime_)) {
      if (name != "rng" && t.dim() > 0) bytes += t.numel() * t.element_size();
    }
    return bytes;
  }
};

TEST_F(CheckpointerStaging, TheNextGenerationsFirstSaveCopiesIntoTheMemoryTheLastOneUsed) {
  StagingPool& pool = StagingPool::OfProcess();
  pool.Clear();
  const int64_t before = pool.allocated_bytes();
  Status saved;
  {
    Checkpointer first(*runtime_, spec_, checkpoint_options_);
    TrainAndSave(first, 1, &saved);
    ASSERT_TRUE(saved.ok()) << saved.message();
  }
  const int64_t staged = StagedBytes();
  ASSERT_GT(staged, 0);
  EXPECT_EQ(pool.allocated_bytes() - before, staged);
  EXPECT_EQ(pool.kept_bytes(), staged);  // given back as the checkpointer ended
  {
    pool.Reserve({torch::zeros({7})}, 1);  // a shape no save of this model takes
    Checkpointer next(*runtime_, spec_, checkpoint_options_);
    TrainAndSave(next, 2, &saved);
    ASSERT_TRUE(saved.ok()) << saved.message();
    EXPECT_EQ(pool.allocated_bytes() - before, staged + 7 * 4);  // nothing new for the save
    EXPECT_EQ(pool.kept_bytes(), 0);  // the save took its buffers, and the rest was freed
  }
  // The check can fail: with the pool emptied between generations, the save allocates again.
  pool.Clear();
  Checkpointer fresh(*runtime_, spec_, checkpoint_options_);
  TrainAndSave(fresh, 3, &saved);
  ASSERT_TRUE(saved.ok()) << saved.message();
  EXPECT_EQ(pool.allocated_bytes() - before, 2 * staged + 7 * 4);
}

}  // namespace
}  // namespace mitra::worker
