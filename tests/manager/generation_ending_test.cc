// GenerationEnding (manager/generation_ending.h): how a generation ends decides the job's
// outcome once its ranks are down, a failure on the way decides it once, and a change is told
// with its timing once.
#include "manager/generation_ending.h"

#include <gtest/gtest.h>

namespace mitra::manager {
namespace {

using Kind = GenerationEnding::Kind;
using Outcome = FinishAction::Outcome;

TEST(GenerationEnding, NothingEndingMeansTheJobIsDoneWhenTheRanksAre) {
  const GenerationEnding ending;
  EXPECT_TRUE(ending.Is(Kind::kNone));
  ASSERT_TRUE(ending.Outcome());
  EXPECT_EQ(ending.Outcome()->outcome, Outcome::kDone);
  EXPECT_FALSE(ending.ChangePending());
}

TEST(GenerationEnding, AMorphOrARecoveryLaunchesTheNextGeneration) {
  GenerationEnding ending;
  ending.BeginMorph(10);
  EXPECT_TRUE(ending.Is(Kind::kMorph));
  EXPECT_EQ(ending.Outcome(), std::nullopt);
  ending.Launched();
  ending.BeginRecovery(20);
  EXPECT_TRUE(ending.Is(Kind::kRecovery));
  EXPECT_EQ(ending.Outcome(), std::nullopt);
}

// The change is told once, at the next generation's first step, with when it was detected and
// when the last rank of the ending generation exited.
TEST(GenerationEnding, AChangeIsToldOnceWithItsTiming) {
  GenerationEnding ending;
  ending.RanksExited(5);  // no change pending: nothing to time
  EXPECT_FALSE(ending.ChangePending());
  ending.BeginMorph(10);
  ending.RanksExited(12.5);
  ending.Launched();
  EXPECT_TRUE(ending.Is(Kind::kNone));
  ASSERT_TRUE(ending.ChangePending()) << "the change waits for the next generation's first step";
  const std::optional<GenerationEnding::Change> change = ending.TakeChange();
  ASSERT_TRUE(change);
  EXPECT_EQ(change->kind, "morph");
  EXPECT_EQ(change->detected, 10);
  EXPECT_EQ(change->ranks_exited, 12.5);
  EXPECT_EQ(ending.TakeChange(), std::nullopt);
  // A recovery that follows a morph before its first step replaces it.
  ending.BeginMorph(30);
  ending.BeginRecovery(31);
  EXPECT_EQ(ending.TakeChange()->kind, "recovery");
}

TEST(GenerationEnding, AStopEndsStoppedUnlessAFailureCameOnTheWay) {
  GenerationEnding stopped;
  stopped.BeginStop();
  EXPECT_EQ(stopped.Outcome()->outcome, Outcome::kStopped);

  GenerationEnding failed;
  failed.BeginStop();
  failed.FailJob("the workers did not stop within 2 min");
  failed.FailJob("a second SIGINT");  // the first reason is the job's
  EXPECT_TRUE(failed.Is(Kind::kStop)) << "the ranks are still brought down as a stop";
  ASSERT_TRUE(failed.Outcome());
  EXPECT_EQ(failed.Outcome()->outcome, Outcome::kFailed);
  EXPECT_EQ(failed.Outcome()->reason, "the workers did not stop within 2 min");
}

// A failure said during a morph (a rank that failed after the last step) ends the job instead
// of the launch the morph would have made.
TEST(GenerationEnding, AFailureSaidDuringAMorphEndsTheJob) {
  GenerationEnding ending;
  ending.BeginMorph(1);
  ending.FailJob("rank 2 exited with code 1 after training finished");
  ASSERT_TRUE(ending.Outcome());
  EXPECT_EQ(ending.Outcome()->reason, "rank 2 exited with code 1 after training finished");
}

// The restart budget's verdict (or a deadline) ends the job as it says, over a failure said
// before.
TEST(GenerationEnding, TheJobsEndReplacesAFailureSaidBefore) {
  GenerationEnding ending;
  ending.FailJob("rank 0 failed after training finished");
  ending.EndJob(FinishAction{Outcome::kBadConfiguration, "exit code 2 before the first step"});
  EXPECT_TRUE(ending.Is(Kind::kJobEnd));
  EXPECT_EQ(ending.Outcome()->outcome, Outcome::kBadConfiguration);
  EXPECT_EQ(ending.Outcome()->reason, "exit code 2 before the first step");
}

}  // namespace
}  // namespace mitra::manager
